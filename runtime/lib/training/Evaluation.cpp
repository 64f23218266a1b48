//===- Evaluation.cpp - trellis run's held-out loss -----------------------===//
//
// The loss on --eval-data: every --eval-every steps, after the last step,
// and for a run of no steps on the weights it started from.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

namespace trellis::runtime {

StatusOr<std::optional<double>> evaluateAfterStep(Trainer &trainer,
                                                  const TrainOptions &options,
                                                  bool lastStep) {
  int64_t step = trainer.completedSteps();
  bool due =
      (options.evalEvery > 0 && step % options.evalEvery == 0) || lastStep;
  if (!trainer.evaluates() || !due)
    return std::optional<double>();
  StatusOr<double> evaluated = trainer.evaluate(options.evalBatches);
  if (!evaluated.ok())
    return evaluated.status();
  return std::optional<double>(*evaluated);
}

Status evaluateWithoutSteps(Trainer &trainer, const TrainOptions &options) {
  if (options.steps != 0 || !trainer.evaluates())
    return Status::success();
  StatusOr<double> evaluated = trainer.evaluate(options.evalBatches);
  if (!evaluated.ok())
    return evaluated.status();
  if (trainer.rank() == 0)
    printEvalLine(trainer.completedSteps(), *evaluated, options.evalBatches);
  return Status::success();
}

} // namespace trellis::runtime
