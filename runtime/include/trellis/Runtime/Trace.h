//===- Trace.h - Measured timelines as Chrome traces ------------*- C++ -*-===//
//
// What a rank executed and when, written in the Chrome trace format
// (chrome://tracing, Perfetto): a process per rank, a row for the program
// (compute) and one for the communication thread. Times are microseconds of
// the monotonic clock, so the files of ranks on one machine line up; the
// launcher merges the ranks' files into one.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_TRACE_H
#define TRELLIS_RUNTIME_TRACE_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::runtime {

/// One executed instruction (or a wait for one).
struct TraceSlice {
  enum class Lane { Compute, Communication };
  std::string name;
  /// Microseconds of the monotonic clock.
  double startMicros = 0;
  double endMicros = 0;
  Lane lane = Lane::Compute;
};

/// Microseconds of the monotonic clock now.
double monotonicMicros();

/// Writes `slices` of `rank` as a Chrome trace to `path`.
Status writeRankTrace(const std::string &path, int64_t rank,
                      const std::vector<TraceSlice> &slices);

/// The file rank `rank` of a launched run writes before the merge.
std::string rankTracePath(const std::string &path, int64_t rank);

/// Merges the files of ranks [0, ranks) into `path` (times shifted so the
/// earliest event starts at 0) and removes them. A missing or malformed
/// rank file is an error naming it.
Status mergeRankTraces(const std::string &path, int64_t ranks);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TRACE_H
