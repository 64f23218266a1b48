//===- ScheduleCommand.cpp - `trellis schedule` ---------------------------===//
//
// Builds a pipeline schedule, proves it deadlock-free and complete by
// simulating it, and reports its bubble and peak live activations per
// stage; optionally writes a Chrome trace of the simulated timeline. Given a
// model, splits its layers into stages (balanced by estimated time, then
// memory, or as --pp-layers says) and simulates with each stage's cost.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "mlir/IR/MLIRContext.h"
#include "trellis/Analysis/PipelineCost.h"
#include "trellis/Analysis/StageSplit.h"
#include "trellis/Common/PipelineSchedule.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand scheduleCommand(
    "schedule",
    "Simulate a pipeline schedule: bubble, live activations, trace");

namespace {
cl::OptionCategory scheduleCategory("Schedule");
cl::OptionCategory modelCostCategory("Costs from a model");
cl::OptionCategory fixedCostCategory("Costs without a model");

cl::opt<std::string> scheduleModel(cl::Positional,
                                   cl::desc("[config.json | model.mlir]"),
                                   cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<int64_t> scheduleBatch("batch", cl::desc("Micro-batch size (model)"),
                               cl::init(1), cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<int64_t> scheduleSeq("seq", cl::desc("Sequence length (model)"),
                             cl::init(64), cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<std::string> scheduleLayers(
    "pp-layers",
    cl::desc("Layers per virtual stage instead of the balanced split"),
    cl::value_desc("6,7,7,6"), cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<double>
    scheduleFlopRate("flops-per-second",
                     cl::desc("Roofline compute rate of a stage (model)"),
                     cl::init(1e11), cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<double>
    scheduleByteRate("bytes-per-second",
                     cl::desc("Roofline memory rate of a stage (model)"),
                     cl::init(1e10), cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<std::string> scheduleRecompute(
    "recompute",
    cl::desc("none, selective or full (model): with full, a stage keeps "
             "only its layers' inputs per micro-batch and recomputes each "
             "layer's forward before its backward"),
    cl::init("none"), cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<double> scheduleLinkRate(
    "link-bytes-per-second",
    cl::desc("Bandwidth between neighbouring stages (model): a transfer "
             "takes the boundary's bytes over it"),
    cl::init(2.5e10), cl::cat(modelCostCategory), cl::sub(scheduleCommand));
cl::opt<int64_t> schedulePipeline("pp", cl::desc("Pipeline stages (ranks)"),
                                  cl::init(2), cl::cat(scheduleCategory), cl::sub(scheduleCommand));
cl::opt<int64_t> scheduleMicroBatches("microbatches",
                                      cl::desc("Micro-batches per batch"),
                                      cl::init(8), cl::cat(scheduleCategory), cl::sub(scheduleCommand));
cl::opt<std::string> scheduleKind("schedule",
                                  cl::desc("gpipe, 1f1b, interleaved or zb-h1"),
                                  cl::init("1f1b"), cl::cat(scheduleCategory), cl::sub(scheduleCommand));
cl::opt<int64_t>
    scheduleChunks("chunks", cl::desc("Model chunks per stage (interleaved)"),
                   cl::init(1), cl::cat(scheduleCategory), cl::sub(scheduleCommand));
cl::opt<double> scheduleForward("forward-time",
                                cl::desc("Time of one stage's forward "
                                         "(without a model)"),
                                cl::init(1.0), cl::cat(fixedCostCategory), cl::sub(scheduleCommand));
cl::opt<double> scheduleBackward("backward-time",
                                 cl::desc("Time of one stage's backward "
                                          "(without a model)"),
                                 cl::init(2.0), cl::cat(fixedCostCategory), cl::sub(scheduleCommand));
cl::opt<double> scheduleTransfer("transfer-time",
                                 cl::desc("Time of one transfer (without a "
                                          "model)"),
                                 cl::init(0.0), cl::cat(fixedCostCategory), cl::sub(scheduleCommand));
cl::opt<std::string> scheduleTrace("trace",
                                   cl::desc("Write a Chrome trace here"),
                                   cl::value_desc("file.json"),
                                   cl::cat(scheduleCategory), cl::sub(scheduleCommand));

std::string mebibytes(double bytes) {
  return llvm::formatv("{0:F2} MiB", bytes / (1 << 20)).str();
}

/// A model's stages: the layers of each virtual stage and their costs.
struct StagePlan {
  StageLayers layers;
  std::vector<PartCost> costs;
  /// Per virtual stage: activations one micro-batch keeps until its
  /// backward, and those alive only while one part is recomputed.
  std::vector<double> activationBytes;
  std::vector<double> transientBytes;
};

/// Splits the model's layers over the schedule's virtual stages and sets
/// per-stage durations in `costs`; prints the split. Returns nullopt after
/// reporting an error.
std::optional<StagePlan> planStages(const PipelineShape &shape,
                                    const PipelineStreams &streams,
                                    PipelineCosts &costs) {
  bool recomputeAll = scheduleRecompute == "full";
  if (!recomputeAll && scheduleRecompute != "none" &&
      scheduleRecompute != "selective") {
    reportError("schedule", "unknown recomputation '" + scheduleRecompute +
                                "': expected none, selective or full");
    return std::nullopt;
  }
  mlir::MLIRContext context;
  std::optional<LoadedModel> model = loadModel(
      context, scheduleModel, {scheduleBatch, scheduleSeq}, "schedule");
  if (!model)
    return std::nullopt;
  auto forward = model->module->lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward) {
    reportError("schedule",
                "expected a function @forward in '" + scheduleModel + "'");
    return std::nullopt;
  }
  mlir::FailureOr<ModelPipelineCost> cost = computePipelineCost(
      forward, RooflineRates{scheduleFlopRate, scheduleByteRate});
  if (mlir::failed(cost))
    return std::nullopt;
  int64_t stages = shape.virtualStages();
  int64_t numLayers = cost->parts.layers.size();
  std::string error;
  StagePlan plan;
  bool given = !scheduleLayers.empty();
  std::optional<StageLayers> split =
      chooseStageLayers(cost->parts, scheduleLayers, streams, shape,
                        ModelPipelineCost::forwardShare, &error);
  if (!split) {
    reportError("schedule", error);
    return std::nullopt;
  }
  plan.layers = *split;
  plan.costs = stageCosts(cost->parts, plan.layers);
  for (const PartCost &activation : stageCosts(cost->activations, plan.layers))
    plan.activationBytes.push_back(activation.memory);
  plan.transientBytes.assign(stages, 0.0);
  if (recomputeAll) {
    // Each layer keeps its input; one layer's activations come back at a
    // time during the backward (the head is not recomputed).
    for (int64_t stage = 0, layer = 0; stage < stages; ++stage) {
      double kept = cost->boundaryBytes * plan.layers[stage];
      double largest = 0;
      for (int64_t i = 0; i < plan.layers[stage]; ++i, ++layer)
        largest = std::max(largest, cost->activations.layers[layer].memory);
      if (stage == stages - 1)
        kept += cost->activations.head.memory;
      plan.costs[stage].memory -= plan.activationBytes[stage] - kept;
      plan.activationBytes[stage] = kept;
      plan.transientBytes[stage] = largest;
    }
  }
  llvm::outs() << llvm::formatv(
      "{0} layers over {1} virtual stages ({2}):", numLayers, stages,
      given ? "--pp-layers" : "balanced");
  for (int64_t layers : plan.layers)
    llvm::outs() << " " << layers;
  llvm::outs() << "\n";
  costs.transfer = cost->boundaryBytes / scheduleLinkRate;
  llvm::outs() << llvm::formatv(
      "transfers: {0} per micro-batch across a boundary, {1:F3} ms\n",
      mebibytes(cost->boundaryBytes), costs.transfer * 1e3);
  int64_t first = 0;
  for (int64_t stage = 0; stage < stages; ++stage) {
    double forwardSeconds =
        plan.costs[stage].time * ModelPipelineCost::forwardShare;
    double backwardSeconds = plan.costs[stage].time - forwardSeconds;
    if (recomputeAll)
      backwardSeconds += forwardSeconds;
    costs.forwardByStage.push_back(forwardSeconds);
    costs.backwardByStage.push_back(backwardSeconds);
    int64_t last = first + plan.layers[stage] - 1;
    llvm::outs() << llvm::formatv(
        "virtual stage {0}: layers {1}-{2}{3}{4}, forward {5:F3} ms, backward "
        "{6:F3} ms, activations {7} per micro-batch\n",
        stage, first, last, stage == 0 ? " + embedding" : "",
        stage == stages - 1 ? " + head" : "", forwardSeconds * 1e3,
        backwardSeconds * 1e3, mebibytes(plan.activationBytes[stage]));
    first = last + 1;
  }
  return plan;
}
} // namespace

int runScheduleCommand() {
  std::optional<ScheduleKind> kind = parseScheduleKind(scheduleKind);
  if (!kind)
    return reportError("schedule", "unknown schedule '" + scheduleKind +
                                       "': expected gpipe, 1f1b, "
                                       "interleaved or zb-h1");
  PipelineShape shape{schedulePipeline, scheduleMicroBatches, scheduleChunks};
  std::string error;
  std::optional<PipelineStreams> streams = buildSchedule(*kind, shape, &error);
  if (!streams)
    return reportError("schedule", error);
  PipelineCosts costs{scheduleForward, scheduleBackward, scheduleTransfer};
  std::optional<StagePlan> stagePlan;
  if (!scheduleModel.empty()) {
    stagePlan = planStages(shape, *streams, costs);
    if (!stagePlan)
      return 1;
  }
  std::optional<PipelineSimulation> simulation =
      simulateSchedule(*streams, shape, costs, &error);
  if (!simulation)
    return reportError("schedule", error);
  llvm::outs() << llvm::formatv(
      "{0}: {1} stages, {2} micro-batches, {3} chunk(s) per stage\n",
      scheduleKindName(*kind), shape.ranks, shape.microBatches, shape.chunks);
  if (stagePlan)
    llvm::outs() << llvm::formatv("makespan {0:F3} ms, bubble {1:F4}\n",
                                  simulation->makespan * 1e3,
                                  simulation->bubbleFraction);
  else
    llvm::outs() << llvm::formatv("makespan {0:F2}, bubble {1:F4}\n",
                                  simulation->makespan,
                                  simulation->bubbleFraction);
  for (int64_t rank = 0; rank < shape.ranks; ++rank) {
    llvm::outs() << llvm::formatv(
        "stage {0}: {1} actions, peak live activations {2}", rank,
        (*streams)[rank].size(), simulation->peakLiveActivations[rank]);
    if (stagePlan) {
      // Weights and optimizer state of every chunk on the rank, and the
      // saved activations of its most live micro-batches (chunks weighted
      // alike: an upper bound when their activations differ).
      double states = 0, activations = 0, transient = 0;
      for (int64_t chunk = 0; chunk < shape.chunks; ++chunk) {
        int64_t stage = chunk * shape.ranks + rank;
        states +=
            stagePlan->costs[stage].memory - stagePlan->activationBytes[stage];
        activations = std::max(activations, stagePlan->activationBytes[stage]);
        transient = std::max(transient, stagePlan->transientBytes[stage]);
      }
      llvm::outs() << llvm::formatv(
          ", peak memory {0} (states {1})",
          mebibytes(states +
                    simulation->peakLiveActivations[rank] * activations +
                    transient),
          mebibytes(states));
    }
    llvm::outs() << "\n";
  }
  if (!scheduleTrace.empty()) {
    std::ofstream trace(scheduleTrace);
    if (!trace)
      return reportError("schedule", "cannot write '" + scheduleTrace + "'");
    trace << chromeTrace(*simulation);
  }
  return 0;
}

} // namespace trellis::driver
