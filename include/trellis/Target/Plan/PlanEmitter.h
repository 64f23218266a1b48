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
#include "trellis/Pipeline/PipelineSplit.h"
#include "llvm/Support/JSON.h"

namespace trellis {

/// The plan format version the emitter writes and the runtime reads.
constexpr int64_t kPlanFormatVersion = 4;

/// Free-form facts copied into the plan's "metadata" object.
struct PlanMetadata {
  llvm::json::Object fields;
};

/// A step split into action programs: its programs and schedules, the mesh
/// with the pipeline axis added (major to minor), and that axis's name
/// (empty for a step of micro-batches on one stage: the mesh is the
/// step's).
struct PipelinePlan {
  PipelineProgram program;
  std::vector<std::pair<std::string, int64_t>> mesh;
  std::string axis = "pp";
};

/// Emits the plan of `step` (format version 4): one step program, or with
/// `pipeline` each stage's action programs and schedule (transfers as send
/// and recv over the pipeline axis, micro-batch totals as accumulate, each
/// argument and result listing the stages that hold it). Fails (with a
/// diagnostic on the offending op) when the function holds an op the plan
/// cannot express.
mlir::FailureOr<llvm::json::Value>
emitPlan(mlir::func::FuncOp step, PlanMetadata metadata,
         const PipelinePlan *pipeline = nullptr);

} // namespace trellis

#endif // TRELLIS_TARGET_PLAN_PLANEMITTER_H
