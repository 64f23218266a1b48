//===- StepReport.cpp - trellis run's line for each step ------------------===//
//
// What rank 0 prints on stdout after a step: the loss, the rate, the time,
// and the metrics the plan reports (by their declarations); the held-out loss;
// why an update was skipped.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include <cmath>
#include <cstdio>

namespace trellis::runtime {

namespace {

void printStepLine(Trainer &trainer, const StepOutcome &outcome) {
  std::printf("step %lld | loss %.6f | %.0f tokens/s | %.1f ms",
              static_cast<long long>(outcome.step), trainer.lastLoss(),
              trainer.tokensPerStep() / outcome.seconds, outcome.seconds * 1e3);
  if (std::optional<double> rate = trainer.lastLearningRate())
    std::printf(" | lr %.6g", *rate);
  // Each metric the plan reports, as its pass declared it.
  for (const StepMetric &metric : trainer.metrics())
    if (std::optional<double> summary = metric.summary())
      std::printf(std::isnan(*summary) ? " | %s nan" : " | %s %.6g",
                  metric.report.label.c_str(), *summary);
  if (const DynamicLossScale *scale = trainer.lossScale())
    std::printf(" | loss scale %g | skipped %lld", scale->scale,
                static_cast<long long>(scale->skippedSteps));
  std::printf("\n");
}

} // namespace

void printEvalLine(int64_t step, double loss, int64_t batches) {
  std::printf("eval step %lld | loss %.6f | %lld batches\n",
              static_cast<long long>(step), loss,
              static_cast<long long>(batches));
}

void printStepReport(Trainer &trainer, const TrainOptions &options,
                     const StepOutcome &outcome) {
  if (outcome.step % options.logEvery == 0 || outcome.lastStep)
    printStepLine(trainer, outcome);
  if (outcome.evalLoss)
    printEvalLine(outcome.step, *outcome.evalLoss, options.evalBatches);
  if (!trainer.lastSkipReason().empty())
    std::printf("step %lld skipped: %s\n", static_cast<long long>(outcome.step),
                trainer.lastSkipReason().c_str());
}

} // namespace trellis::runtime
