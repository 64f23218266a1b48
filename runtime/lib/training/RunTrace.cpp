//===- RunTrace.cpp - trellis run's --trace -------------------------------===//
//
// Each rank writes its own trace file; the process that started the ranks
// (or a lone process) merges them into the one --trace names.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include "trellis/Runtime/Trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace trellis::runtime {

Status prepareTrace(const TrainOptions &options) {
  if (options.rank >= 0 || options.tracePath.empty())
    return Status::success();
  // Fail before training, not after it, when the trace cannot be written.
  if (!std::ofstream(options.tracePath))
    return Status::error("cannot write the trace '" + options.tracePath +
                         "': " + std::strerror(errno));
  // Only a finished run leaves a trace.
  std::remove(options.tracePath.c_str());
  return Status::success();
}

Status finishLaunchedTrace(const TrainOptions &options, int exitCode,
                           int64_t ranks) {
  if (options.tracePath.empty())
    return Status::success();
  // A failed run leaves no empty trace behind (the rank files stay).
  if (exitCode != 0) {
    std::remove(options.tracePath.c_str());
    return Status::success();
  }
  if (options.nnodes == 1)
    return mergeRankTraces(options.tracePath, ranks);
  return Status::success();
}

Status writeTrace(Trainer &trainer, const TrainOptions &options) {
  if (options.tracePath.empty())
    return Status::success();
  // A launched rank leaves its file for the launcher to merge; a lone
  // process merges its own.
  int64_t rank = std::max<int64_t>(options.rank, 0);
  TRELLIS_RETURN_IF_ERROR(writeRankTrace(rankTracePath(options.tracePath, rank),
                                         rank, trainer.executor().trace()));
  if (options.rank < 0)
    return mergeRankTraces(options.tracePath, 1);
  return Status::success();
}

} // namespace trellis::runtime
