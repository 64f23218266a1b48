//===- Summary.cpp - What trellis run reports after the steps -------------===//
//
// Rank 0's summary line (mean step time, rate, memory), the note on a run
// that ended in the learning rate's warmup, each pipeline rank's memory,
// and the --profile table of time and rate by op.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

namespace trellis::runtime {

namespace {

void printSummary(Trainer &trainer, const StepTimes &times) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  double meanMs =
      times.timedSteps ? times.totalSeconds / times.timedSteps * 1e3 : 0;
  if (trainer.completedSteps() == times.firstStep)
    std::printf("summary: no steps | buffers %.1f MiB (arena %.1f MiB) | "
                "peak memory %.1f MiB\n",
                trainer.executor().allocatedBytes() / 1048576.0,
                trainer.executor().arenaBytes() / 1048576.0,
                usage.ru_maxrss / 1024.0);
  else
    std::printf(
        "summary: steps %lld-%lld | mean step %.2f ms | %.0f tokens/s | "
        "buffers %.1f MiB (arena %.1f MiB) | peak memory %.1f MiB\n",
        static_cast<long long>(times.firstStep + 1),
        static_cast<long long>(trainer.completedSteps()), meanMs,
        meanMs > 0 ? trainer.tokensPerStep() / (meanMs / 1e3) : 0.0,
        trainer.executor().allocatedBytes() / 1048576.0,
        trainer.executor().arenaBytes() / 1048576.0, usage.ru_maxrss / 1024.0);
}

/// A warmup longer than the run: the rate never reached its peak.
void printWarmupNote(Trainer &trainer, const StepTimes &times) {
  std::optional<LrSchedule> schedule =
      trainer.executor().plan().learningRateSchedule();
  if (schedule && trainer.completedSteps() > times.firstStep &&
      trainer.completedSteps() < schedule->warmupSteps)
    std::printf("note: the run ended in the learning rate's warmup (step "
                "%lld of %lld): the rate never reached its peak %g\n",
                static_cast<long long>(trainer.completedSteps()),
                static_cast<long long>(schedule->warmupSteps), schedule->peak);
}

/// A pipeline's stages hold different parts: each rank's memory, gathered
/// from every rank, printed by rank 0.
Status reportStageMemory(Trainer &trainer) {
  if (!trainer.executor().plan().pipelineAxis)
    return Status::success();
  StatusOr<std::vector<RankMemory>> memory = trainer.gatherMemory();
  if (!memory.ok())
    return memory.status();
  const Plan &plan = trainer.executor().plan();
  for (size_t r = 0; trainer.rank() == 0 && r < memory->size(); ++r)
    std::printf("memory: rank %zu (stage %lld) | buffers %.1f MiB (arena "
                "%.1f MiB) | peak memory %.1f MiB | live micro-batches "
                "%lld\n",
                r, static_cast<long long>(stageOfRank(plan, r)),
                (*memory)[r].buffersMiB, (*memory)[r].arenaMiB,
                (*memory)[r].peakMiB,
                static_cast<long long>(
                    plan.stages[stageOfRank(plan, r)].liveMicroBatches));
  return Status::success();
}

/// The time in each op's kernels over the run's steps, largest first, and
/// its achieved rate: its FLOPs per step over its time per step.
void printProfile(Trainer &trainer, int64_t steps) {
  double total = 0;
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto &[op, entry] : trainer.executor().profile()) {
    total += entry.first;
    sorted.emplace_back(entry.first, op);
  }
  std::sort(sorted.rbegin(), sorted.rend());
  std::printf("profile: %.1f ms in kernels over %lld steps\n", total * 1e3,
              static_cast<long long>(steps));
  std::map<std::string, double> flops = trainer.executor().stepFlops();
  for (const auto &[seconds, op] : sorted) {
    std::printf("  %-20s %9.2f ms  %5.1f%%", op.c_str(), seconds * 1e3,
                total > 0 ? 100.0 * seconds / total : 0.0);
    auto counted = flops.find(op);
    if (counted != flops.end() && seconds > 0)
      std::printf("  %8.2f GFLOP/s",
                  counted->second * static_cast<double>(steps) / seconds / 1e9);
    std::printf("\n");
  }
}

} // namespace

Status reportRun(Trainer &trainer, const TrainOptions &options,
                 const StepTimes &times) {
  bool printing = trainer.rank() == 0;
  if (printing) {
    printSummary(trainer, times);
    printWarmupNote(trainer, times);
  }
  TRELLIS_RETURN_IF_ERROR(reportStageMemory(trainer));
  if (options.profile && printing)
    printProfile(trainer, options.steps);
  return Status::success();
}

} // namespace trellis::runtime
