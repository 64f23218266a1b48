//===- StepLoop.cpp - trellis run's training steps ------------------------===//
//
// Each step: the test's fault where one is due, the timed step, its
// evaluation, its report and metrics, its periodic checkpoint.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include <chrono>
#include <cstdio>

namespace trellis::runtime {

namespace {

/// Says once, on stderr, why a device that records steps (--cuda-graph)
/// cannot record this run's: known at the start, or when a recording
/// fails. Silent where profiling or tracing run the steps unrecorded.
class RecordingObstacleNotice {
public:
  void sayOnce(Trainer &trainer, const TrainOptions &options) {
    std::string obstacle = trainer.executor().stepRecordingObstacle();
    if (said_ || !options.cudaGraph ||
        !trainer.executor().device().recordsSteps() || obstacle.empty() ||
        options.profile || !options.tracePath.empty())
      return;
    said_ = true;
    std::fprintf(stderr,
                 "trellis run: rank %lld: steps run without a CUDA graph: "
                 "%s\n",
                 static_cast<long long>(trainer.rank()), obstacle.c_str());
  }

private:
  bool said_ = false;
};

/// Runs the next step and times it.
StatusOr<StepOutcome> runTimedStep(Trainer &trainer) {
  using Clock = std::chrono::steady_clock;
  // The loss scale counts the steps an fp16 overflow skipped.
  int64_t overflowsBefore =
      trainer.lossScale() ? trainer.lossScale()->skippedSteps : 0;
  Clock::time_point start = Clock::now();
  Status status = trainer.step();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  TRELLIS_RETURN_IF_ERROR(status);
  StepOutcome outcome;
  outcome.step = trainer.completedSteps();
  outcome.seconds = seconds;
  outcome.skipped = !trainer.lastSkipReason().empty() ||
                    (trainer.lossScale() &&
                     trainer.lossScale()->skippedSteps > overflowsBefore);
  return outcome;
}

} // namespace

void setExecutorModes(Trainer &trainer, const TrainOptions &options) {
  trainer.executor().setProfiling(options.profile);
  trainer.executor().setTracing(!options.tracePath.empty());
  trainer.executor().setStepRecording(options.cudaGraph);
}

StatusOr<StepTimes> trainSteps(Trainer &trainer, const TrainOptions &options,
                               const InjectedFaults &faults,
                               std::ofstream &metrics) {
  bool printing = trainer.rank() == 0;
  RecordingObstacleNotice recording;
  recording.sayOnce(trainer, options);
  StepTimes times;
  times.firstStep = trainer.completedSteps();
  for (int64_t i = 0; i < options.steps; ++i) {
    injectDueFault(trainer, faults.fault);
    StatusOr<StepOutcome> outcome = runTimedStep(trainer);
    if (!outcome.ok())
      return outcome.status();
    recording.sayOnce(trainer, options);
    if (i > 0 || options.steps == 1) {
      times.totalSeconds += outcome->seconds;
      ++times.timedSteps;
    }
    outcome->lastStep = i + 1 == options.steps;
    StatusOr<std::optional<double>> evalLoss =
        evaluateAfterStep(trainer, options, outcome->lastStep);
    if (!evalLoss.ok())
      return evalLoss.status();
    outcome->evalLoss = *evalLoss;
    if (printing && metrics.is_open())
      TRELLIS_RETURN_IF_ERROR(
          writeMetricsRecord(metrics, trainer, options, *outcome));
    if (printing)
      printStepReport(trainer, options, *outcome);
    std::fflush(stdout);
    TRELLIS_RETURN_IF_ERROR(
        savePeriodicCheckpoint(trainer, options, faults.saveFault));
  }
  return times;
}

} // namespace trellis::runtime
