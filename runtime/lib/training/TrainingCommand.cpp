//===- TrainingCommand.cpp - trellis run's body ---------------------------===//
//
// Checks the options, starts the ranks (the launcher) or trains this one:
// a line per step, periodic and final checkpoints, the summary, the
// profile and the trace; fault injection for tests. The steps are in
// TrainingRun.h.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include "trellis/Runtime/Launcher.h"

#include <cstdio>

namespace trellis::runtime {

int runTrainingCommand(const TrainOptions &given) {
  TrainOptions options = given;
  std::string prefix = "trellis run: error: ";
  auto fail = [&](const Status &status) {
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), status.message().c_str());
    return 1;
  };
  // Held for the whole run: rank 0 of an outside launcher's job serves it.
  StatusOr<std::unique_ptr<TcpStoreServer>> store = joinOuterLaunch(options);
  if (!store.ok())
    return fail(store.status());
  if (options.rank >= 0)
    prefix = "trellis run: rank " + std::to_string(options.rank) + ": error: ";
  if (options.rank >= 0 && options.outerLauncher.empty())
    if (Status bound = bindRankToLauncher(); !bound.ok())
      return fail(bound);
  StatusOr<InjectedFaults> faults = checkRunOptions(options);
  if (!faults.ok())
    return fail(faults.status());
  if (Status traceable = prepareTrace(options); !traceable.ok())
    return fail(traceable);
  std::ofstream metrics;
  if (Status opened = openMetrics(options, metrics); !opened.ok())
    return fail(opened);
  StatusOr<std::optional<int>> launched = launchRanksIfNeeded(options);
  if (!launched.ok())
    return fail(launched.status());
  if (*launched)
    return **launched;

  StatusOr<std::unique_ptr<Trainer>> created = Trainer::create(options);
  if (!created.ok())
    return fail(created.status());
  Trainer &trainer = **created;
  if (trainer.rank() == 0)
    for (const std::string &note : trainer.dataNotes(options.evalBatches))
      std::printf("note: %s\n", note.c_str());
  setExecutorModes(trainer, options);
  int64_t firstStep = trainer.completedSteps();
  StatusOr<StepTimes> times = trainSteps(trainer, options, *faults, metrics);
  if (!times.ok())
    return fail(saveBeforeFailing(trainer, options, faults->saveFault,
                                  firstStep, times.status()));
  if (Status evaluated = evaluateWithoutSteps(trainer, options);
      !evaluated.ok())
    return fail(evaluated);
  if (Status reported = reportRun(trainer, options, *times); !reported.ok())
    return fail(reported);
  if (Status saved = saveFinalCheckpoint(trainer, options, faults->saveFault);
      !saved.ok())
    return fail(saved);
  if (Status written = writeTrace(trainer, options); !written.ok())
    return fail(written);
  return 0;
}

} // namespace trellis::runtime
