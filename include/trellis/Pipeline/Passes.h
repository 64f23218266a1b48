//===- Passes.h - Pipeline passes -------------------------------*- C++ -*-===//

#ifndef TRELLIS_PIPELINE_PASSES_H
#define TRELLIS_PIPELINE_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "trellis/Common/PipelineSchedule.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

namespace trellis {

#define GEN_PASS_DECL
#include "trellis/Pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trellis/Pipeline/Passes.h.inc"

/// What the pipeline phase does to a step of micro-batches.
struct PipelinePhaseOptions {
  /// The step to cut.
  std::string function = "train_step";
  /// Pipeline ranks and model chunks per rank; with one virtual stage the
  /// step is only split into action programs (no stage assignment).
  int64_t stages = 1;
  int64_t chunks = 1;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  /// Layers per virtual stage; empty: the balanced split.
  std::vector<int64_t> layers;
  /// See SplitStagesPass: the pipeline's axis, the axis values cross in
  /// pieces over, the plan's mesh order.
  std::string axis = "pp";
  std::string pieceAxis;
  std::vector<std::string> meshOrder;
  /// Split into stage functions and schedule after assigning stages;
  /// without it the phase ends with every op's stage marked, for the cost
  /// query.
  bool split = true;
};

/// Adds stage assignment (with several virtual stages), the split into
/// stage functions, the schedule and its verification.
void buildPipelinePhase(mlir::OpPassManager &pm,
                        const PipelinePhaseOptions &options);

/// Registers `trellis-pipeline` (the phase with its options) with
/// trellis-opt.
void registerPipelinePhase();

} // namespace trellis

#endif // TRELLIS_PIPELINE_PASSES_H
