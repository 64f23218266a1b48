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
#include "llvm/Support/JSON.h"

namespace trellis {

/// The plan format version the emitter writes and the runtime reads.
constexpr int64_t kPlanFormatVersion = 2;

/// Free-form facts copied into the plan's "metadata" object.
struct PlanMetadata {
  llvm::json::Object fields;
};

/// Emits the plan of `step`. Fails (with a diagnostic on the offending op)
/// when the function holds an op the plan cannot express.
mlir::FailureOr<llvm::json::Value> emitPlan(mlir::func::FuncOp step,
                                            PlanMetadata metadata);

} // namespace trellis

#endif // TRELLIS_TARGET_PLAN_PLANEMITTER_H
