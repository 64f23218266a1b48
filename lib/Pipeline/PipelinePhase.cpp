//===- PipelinePhase.cpp - The pipeline phase as one pipeline -------------===//

#include "trellis/Pipeline/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace trellis;

void trellis::buildPipelinePhase(OpPassManager &pm,
                                 const PipelinePhaseOptions &options) {
  if (options.stages * options.chunks > 1) {
    AssignStagesPassOptions assign;
    assign.functionName = options.function;
    assign.stages = options.stages;
    assign.chunks = options.chunks;
    assign.schedule = options.schedule;
    assign.layers.assign(options.layers.begin(), options.layers.end());
    pm.addPass(createAssignStagesPass(assign));
  }
  if (!options.split)
    return;
  SplitStagesPassOptions split;
  split.functionName = options.function;
  split.axis = options.axis;
  split.pieceAxis = options.pieceAxis;
  split.meshOrder.assign(options.meshOrder.begin(), options.meshOrder.end());
  pm.addPass(createSplitStagesPass(split));
  SchedulePipelinePassOptions schedule;
  schedule.functionName = options.function;
  pm.addPass(createSchedulePipelinePass(schedule));
  VerifyPipelinePassOptions verify;
  verify.functionName = options.function;
  pm.addPass(createVerifyPipelinePass(verify));
}

namespace {

/// PipelinePhaseOptions as pipeline options of trellis-opt.
struct PipelinePhasePipelineOptions
    : public PassPipelineOptions<PipelinePhasePipelineOptions> {
  Option<std::string> function{*this, "function",
                               llvm::cl::desc("The step to cut"),
                               llvm::cl::init("train_step")};
  Option<int64_t> stages{*this, "stages", llvm::cl::desc("Pipeline ranks"),
                         llvm::cl::init(2)};
  Option<int64_t> chunks{*this, "chunks",
                         llvm::cl::desc("Model chunks per rank"),
                         llvm::cl::init(1)};
  Option<ScheduleKind> schedule{
      *this, "schedule", llvm::cl::desc("The schedule"),
      llvm::cl::init(ScheduleKind::OneFOneB),
      llvm::cl::values(
          clEnumValN(ScheduleKind::GPipe, "gpipe", "GPipe"),
          clEnumValN(ScheduleKind::OneFOneB, "1f1b", "1F1B"),
          clEnumValN(ScheduleKind::Interleaved, "interleaved",
                     "interleaved 1F1B"),
          clEnumValN(ScheduleKind::ZeroBubble, "zb-h1", "zero-bubble ZB-H1"))};
  ListOption<int64_t> layers{*this, "layers",
                             llvm::cl::desc("Layers per virtual stage")};
  Option<std::string> axis{*this, "axis",
                           llvm::cl::desc("The pipeline's mesh axis"),
                           llvm::cl::init("pp")};
  Option<std::string> pieceAxis{
      *this, "piece-axis",
      llvm::cl::desc("Send values every rank of this axis holds in pieces"),
      llvm::cl::init("")};
  ListOption<std::string> meshOrder{
      *this, "mesh-order", llvm::cl::desc("The plan's mesh axes")};
};

} // namespace

void trellis::registerPipelinePhase() {
  PassPipelineRegistration<PipelinePhasePipelineOptions>(
      "trellis-pipeline",
      "The pipeline phase: stage assignment, split, schedule, verification",
      [](OpPassManager &pm, const PipelinePhasePipelineOptions &options) {
        PipelinePhaseOptions phase;
        phase.function = options.function;
        phase.stages = options.stages;
        phase.chunks = options.chunks;
        phase.schedule = options.schedule;
        phase.layers.assign(options.layers.begin(), options.layers.end());
        phase.axis = options.axis;
        phase.pieceAxis = options.pieceAxis;
        phase.meshOrder.assign(options.meshOrder.begin(),
                               options.meshOrder.end());
        buildPipelinePhase(pm, phase);
      });
}
