//===- StepResults.h - Results a pass adds to a training step ---*- C++ -*-===//

#ifndef TRELLIS_LIB_AUTODIFF_STEPRESULTS_H
#define TRELLIS_LIB_AUTODIFF_STEPRESULTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringRef.h"

namespace trellis {

/// Appends `value` to `step`'s results, marked graph.metric = `metric`
/// (the runtime reports it with each step: grad_norm, expert_load).
void appendMetricResult(mlir::func::FuncOp step, mlir::Value value,
                        llvm::StringRef metric);

} // namespace trellis

#endif // TRELLIS_LIB_AUTODIFF_STEPRESULTS_H
