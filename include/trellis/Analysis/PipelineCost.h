//===- PipelineCost.h - Part costs for pipeline stage splits -*- C++ -*-===//
//
// Estimates, from an imported model's forward function, what each part
// (embedding, every layer, head with loss) costs a pipeline stage: time by a
// roofline over the ops' FLOPs and bytes, memory as weights with their
// gradients and AdamW moments plus the activations one micro-batch saves.
// Parts are the ops' `graph.part` marks (graph::getModelPart).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_ANALYSIS_PIPELINECOST_H
#define TRELLIS_ANALYSIS_PIPELINECOST_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "trellis/Analysis/StageSplit.h"

namespace trellis {

/// The machine a stage runs on, for the roofline.
struct RooflineRates {
  double flopsPerSecond = 1e11;
  double bytesPerSecond = 1e10;
};

/// Part costs of `forward` with time in seconds and memory in bytes. The
/// time covers forward and backward (backward taken as twice the forward);
/// `forwardShare` of it is the forward. Fails with a diagnostic on an op
/// that declares no part, on parts out of model order, and on layers not
/// numbered 0, 1, ... without gaps.
struct ModelPipelineCost {
  StagedModelCost parts;
  /// Saved activations of one micro-batch per part, in bytes (in `parts`
  /// too, inside memory).
  StagedModelCost activations;
  /// Bytes one micro-batch sends across the busiest boundary between
  /// consecutive parts (the values one part makes and a later one uses:
  /// the residual stream, and anything else computed once and reused).
  double boundaryBytes = 0;
  static constexpr double forwardShare = 1.0 / 3.0;
};
mlir::FailureOr<ModelPipelineCost>
computePipelineCost(mlir::func::FuncOp forward, const RooflineRates &rates);

} // namespace trellis

#endif // TRELLIS_ANALYSIS_PIPELINECOST_H
