//===- WeightGradients.h - The weight-gradient half of a backward -*- C++ -*-===//

#ifndef TRELLIS_LIB_AUTODIFF_WEIGHTGRADIENTS_H
#define TRELLIS_LIB_AUTODIFF_WEIGHTGRADIENTS_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/ArrayRef.h"

namespace trellis {

/// Whether `op` runs in the backward of a micro-batch (phase "backward" or
/// "weight").
bool isBackwardOp(mlir::Operation *op);

/// Re-marks the backward ops of `body` that only make their part's
/// parameter gradients as phase "weight": those whose every use is by such
/// an op of the same model part, by one of `partSums` (the adds of a shared
/// parameter's parts' gradients inside the micro-batch, whatever their
/// part), by an op of the whole step (gradient sums, optimizer) or by the
/// results. The rest of the backward makes the gradients other parts wait
/// for; a zero-bubble schedule runs the weight part later. Only promotes:
/// running it again after adding backward ops marks the new ones alike.
void markWeightGradients(mlir::Block &body,
                         llvm::ArrayRef<mlir::Operation *> partSums = {});

} // namespace trellis

#endif // TRELLIS_LIB_AUTODIFF_WEIGHTGRADIENTS_H
