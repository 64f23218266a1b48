//===- PlanEmitter.h - Training step to plan file ---------------*- C++ -*-===//
//
// Serializes a training-step function of graph ops into the Trellis plan
// format (docs/PlanFormat.md): buffers, arguments and results with their
// roles, and the program as instructions over buffer ids.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_TARGET_PLAN_PLANEMITTER_H
#define TRELLIS_TARGET_PLAN_PLANEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "trellis/Common/PlanFormat.h"
#include "llvm/Support/JSON.h"

namespace trellis {

/// Free-form facts copied into the plan's "metadata" object.
struct PlanMetadata {
  llvm::json::Object fields;
};

/// Emits the plan of `step` (format kPlanFormatVersion) as one step
/// program: a step of one micro-batch without a pipeline
/// (graph.microbatch_sum, if any, is the identity). Fails (with a diagnostic on the offending op) when the
/// function holds an op the plan cannot express.
mlir::FailureOr<llvm::json::Value> emitPlan(mlir::func::FuncOp step,
                                            PlanMetadata metadata);

/// Emits the plan of the stage programs that trellis-split-stages made of
/// `@stepName` in `module`: per stage its action programs (ops grouped by
/// trellis.program) and schedule; transfers as send and recv over the
/// pipeline axis (a receive writes the buffer its send reads), micro-batch
/// totals as accumulate, each argument and result listing the stages that
/// hold it. Fails with a diagnostic when the stages are incomplete or hold
/// an op the plan cannot express.
mlir::FailureOr<llvm::json::Value> emitStagedPlan(mlir::ModuleOp module,
                                                  llvm::StringRef stepName,
                                                  PlanMetadata metadata);

} // namespace trellis

#endif // TRELLIS_TARGET_PLAN_PLANEMITTER_H
