//===- MemoryPlan.h - Arena placement and collective windows ----*- C++ -*-===//
//
// The static memory plan the runtime builds when a plan loads, and that the
// compiler's report reproduces: when the program waits for each collective
// (the end of the window in which its buffers are in use), and where each
// temporary lives in the stage's arena. Plain C++ (no exceptions thrown),
// shared by compiler and runtime.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_MEMORYPLAN_H
#define TRELLIS_COMMON_MEMORYPLAN_H

#include <cstdint>
#include <utility>
#include <vector>

namespace trellis {

/// Arena slots are 64-byte aligned.
constexpr int64_t kArenaAlignment = 64;

/// Collectives in flight: a program may always have two (one running and
/// one queued keep the communication stream busy); beyond that, only while
/// the bytes they touch stay within kInFlightCollectiveBytes. Before it
/// issues a collective that would exceed both, it waits for the oldest.
/// The bound is what lets a gradient reduce-scattered in the backward free
/// its full buffer soon after, and what limits gathers prefetched ahead of
/// their use (FSDP limits in-flight all-gathers the same way).
constexpr int64_t kMinCollectivesInFlight = 2;
constexpr int64_t kInFlightCollectiveBytes = int64_t(64) << 20;

/// `bytes` rounded up to the arena's alignment.
inline int64_t alignedArenaBytes(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// A collective of a program as the wait rule sees it.
struct CollectiveWindow {
  /// Its position in the program.
  int64_t issue = 0;
  /// The first later instruction that reads its results, or a kernel that
  /// communicates itself (the program's count if none).
  int64_t firstReader = 0;
  /// The bytes of its operands and results.
  int64_t bytes = 0;
};

/// The wait point of each collective of `windows` (in issue order): its
/// first reader, or the issue of a later collective that the in-flight
/// bound (above) makes wait for it, whichever comes first; `end` (the
/// program's size) at most.
std::vector<int64_t> planCollectiveWaits(
    const std::vector<CollectiveWindow> &windows, int64_t end);

/// A temporary buffer: its size and lifetime in instruction indices, both
/// inclusive.
struct ArenaBuffer {
  int64_t bytes = 0;
  int64_t first = 0, last = 0;
};

/// Places `buffers` in one arena, largest first, each at the lowest aligned
/// offset free during its lifetime; returns the arena's size and writes each
/// buffer's offset.
int64_t placeArena(const std::vector<ArenaBuffer> &buffers,
                   std::vector<int64_t> &offsets);

/// A buffer of a program as the lifetime analysis sees it: its size, the
/// positions that make it and last use it (inclusive; first < 0: never
/// made), and whether it lives outside the arena (arguments, results,
/// accumulators).
struct BufferSpan {
  int64_t bytes = 0;
  int64_t first = -1, last = -1;
  bool persistent = false;
};

/// The arena of a program: its size and each buffer's offset in it (-1 for
/// persistent buffers and buffers never made).
struct ArenaLayout {
  int64_t bytes = 0;
  std::vector<int64_t> offsets;
};

/// The one lifetime analysis of the runtime's arena (Executor) and the
/// compile report's memory plan (StepReport): each alias (from, to), in
/// order, makes buffer `to` take the bytes of `from` (a result that shares
/// its operand's bytes, a reshape) when both are temporaries that are
/// made; the two are then one buffer living from the first making to the
/// last use of either, and aliases chain. The remaining temporaries are
/// placed in index order (placeArena).
ArenaLayout
layOutArena(std::vector<BufferSpan> buffers,
            const std::vector<std::pair<int64_t, int64_t>> &aliases);

} // namespace trellis

#endif // TRELLIS_COMMON_MEMORYPLAN_H
