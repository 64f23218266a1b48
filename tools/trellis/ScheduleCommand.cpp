//===- ScheduleCommand.cpp - `trellis schedule` ---------------------------===//
//
// Builds a pipeline schedule, proves it deadlock-free and complete by
// simulating it, and reports its bubble and peak live activations per
// stage; optionally writes a Chrome trace of the simulated timeline.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "trellis/Common/PipelineSchedule.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand scheduleCommand(
    "schedule", "Simulate a pipeline schedule: bubble, live activations, trace");

namespace {
cl::opt<int64_t> schedulePipeline("pp", cl::desc("Pipeline stages (ranks)"),
                                  cl::init(2), cl::sub(scheduleCommand));
cl::opt<int64_t> scheduleMicroBatches("microbatches",
                                      cl::desc("Micro-batches per batch"),
                                      cl::init(8), cl::sub(scheduleCommand));
cl::opt<std::string> scheduleKind(
    "schedule", cl::desc("gpipe, 1f1b or interleaved"), cl::init("1f1b"),
    cl::sub(scheduleCommand));
cl::opt<int64_t> scheduleChunks(
    "chunks", cl::desc("Model chunks per stage (interleaved)"), cl::init(1),
    cl::sub(scheduleCommand));
cl::opt<double> scheduleForward("forward-time",
                                cl::desc("Time of one stage's forward"),
                                cl::init(1.0), cl::sub(scheduleCommand));
cl::opt<double> scheduleBackward("backward-time",
                                 cl::desc("Time of one stage's backward"),
                                 cl::init(2.0), cl::sub(scheduleCommand));
cl::opt<double> scheduleTransfer("transfer-time",
                                 cl::desc("Time of one transfer"),
                                 cl::init(0.0), cl::sub(scheduleCommand));
cl::opt<std::string> scheduleTrace("trace",
                                   cl::desc("Write a Chrome trace here"),
                                   cl::value_desc("file.json"),
                                   cl::sub(scheduleCommand));
} // namespace

int runScheduleCommand() {
  std::optional<ScheduleKind> kind = parseScheduleKind(scheduleKind);
  if (!kind)
    return reportError("schedule", "unknown schedule '" + scheduleKind +
                                       "': expected gpipe, 1f1b or "
                                       "interleaved");
  PipelineShape shape{schedulePipeline, scheduleMicroBatches, scheduleChunks};
  std::string error;
  std::optional<PipelineStreams> streams = buildSchedule(*kind, shape, &error);
  if (!streams)
    return reportError("schedule", error);
  PipelineCosts costs{scheduleForward, scheduleBackward, scheduleTransfer};
  std::optional<PipelineSimulation> simulation =
      simulateSchedule(*streams, shape, costs, &error);
  if (!simulation)
    return reportError("schedule", error);
  llvm::outs() << llvm::formatv(
      "{0}: {1} stages, {2} micro-batches, {3} chunk(s) per stage\n",
      scheduleKindName(*kind), shape.ranks, shape.microBatches, shape.chunks);
  llvm::outs() << llvm::formatv("makespan {0:F2}, bubble {1:F4}\n",
                                simulation->makespan,
                                simulation->bubbleFraction);
  for (int64_t stage = 0; stage < shape.ranks; ++stage)
    llvm::outs() << llvm::formatv(
        "stage {0}: {1} actions, peak live activations {2}\n", stage,
        (*streams)[stage].size(), simulation->peakLiveActivations[stage]);
  if (!scheduleTrace.empty()) {
    std::ofstream trace(scheduleTrace);
    if (!trace)
      return reportError("schedule", "cannot write '" + scheduleTrace + "'");
    trace << chromeTrace(*simulation);
  }
  return 0;
}

} // namespace trellis::driver
