//===- Checkpoints.cpp - trellis run's saves ------------------------------===//
//
// The periodic checkpoints (--save-every, pruned to --keep) and the one at
// the run's end (--save), each announced by rank 0.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include <cstdio>

namespace trellis::runtime {

namespace {

/// Saves the checkpoint of step `step` as `dir` (with the test's fault when
/// it is due at that step), then rank 0 prunes the periodic ones to --keep
/// and says where it went.
Status saveCheckpoint(Trainer &trainer, const TrainOptions &options,
                      const std::string &dir, int64_t step,
                      const SaveFault &saveFault) {
  bool printing = trainer.rank() == 0;
  Status saved = trainer.save(dir, saveFault.step == step ? saveFault.fault
                                                          : CheckpointFault());
  if (saved.ok() && printing && options.keep > 0)
    saved = pruneCheckpoints(options.saveDir, options.keep);
  TRELLIS_RETURN_IF_ERROR(saved);
  if (printing)
    std::printf("saved checkpoint at step %lld to %s\n",
                static_cast<long long>(step), dir.c_str());
  return Status::success();
}

} // namespace

Status savePeriodicCheckpoint(Trainer &trainer, const TrainOptions &options,
                              const SaveFault &saveFault) {
  int64_t step = trainer.completedSteps();
  if (options.saveEvery <= 0 || step % options.saveEvery != 0)
    return Status::success();
  return saveCheckpoint(trainer, options,
                        periodicCheckpointPath(options.saveDir, step), step,
                        saveFault);
}

Status saveBeforeFailing(Trainer &trainer, const TrainOptions &options,
                         const SaveFault &saveFault, int64_t firstStep,
                         const Status &failure) {
  bool oneProcess = options.nproc * options.nnodes == 1 &&
                    (options.outerLauncher.empty() || options.worldSize == 1);
  int64_t last = trainer.completedSteps();
  bool savedLast = options.saveEvery > 0 && last % options.saveEvery == 0;
  if (options.saveDir.empty() || !oneProcess || !trainer.stateIntact() ||
      last <= firstStep || savedLast)
    return failure;
  if (Status saved = saveFinalCheckpoint(trainer, options, saveFault);
      !saved.ok())
    return Status::error(failure.message() + "; " + saved.message());
  return Status::error(failure.message() + " (the state after step " +
                       std::to_string(last) + " was saved first)");
}

Status saveFinalCheckpoint(Trainer &trainer, const TrainOptions &options,
                           const SaveFault &saveFault) {
  int64_t last = trainer.completedSteps();
  bool savedLast = options.saveEvery > 0 && last % options.saveEvery == 0 &&
                   options.steps > 0;
  if (options.saveDir.empty() || savedLast)
    return Status::success();
  std::string dir = options.saveEvery > 0
                        ? periodicCheckpointPath(options.saveDir, last)
                        : options.saveDir;
  return saveCheckpoint(trainer, options, dir, last, saveFault);
}

} // namespace trellis::runtime
