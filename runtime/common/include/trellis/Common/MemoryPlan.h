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

#include "trellis/Common/OpContract.h"

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

/// Places `buffers` in one arena, largest first (equal sizes: the earlier
/// lifetime first, so that how buffers are numbered never changes the
/// arena), each at the lowest aligned offset free during its lifetime;
/// returns the arena's size and writes each buffer's offset.
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

/// An instruction of one rank's step, in the order the rank runs them, as
/// the memory plan sees it: the runtime's stage timeline, or the compile
/// report's items of a stage's schedule. Both plan through planStepMemory,
/// so the report's memory plan is the runtime's.
struct PlannedInstruction {
  /// Its op's row in the op table (collectives, transfers, accumulations,
  /// reshapes and updates are told apart by it); null for an op outside the
  /// table, planned as a kernel reading its inputs.
  const OpContract *contract = nullptr;
  /// Whether it runs over mesh axes (`axes` not empty).
  bool overAxes = false;
  /// Whether its kernel communicates over them (kernelCommunicates).
  bool communicates = false;
  /// A transfer's channel (unique per run: a send and the receive of its
  /// value share it) and the pipeline stage at the other end; -1 for other
  /// instructions.
  int64_t channel = -1, peer = -1;
  /// A send's completion: the position (in this program) from which its
  /// peer is known to have received it (planSendCompletions), or -1: the
  /// end of the step.
  int64_t completesAt = -1;
  /// The buffers it reads and writes.
  std::vector<int64_t> inputs, outputs;
};

/// A buffer of the step.
struct PlannedBuffer {
  enum class Kind { Temporary, Argument, Result };
  int64_t bytes = 0;
  /// Arguments and results live outside the arena for the whole step.
  Kind kind = Kind::Temporary;
};

/// An optimizer update's result buffer and the argument buffer it is the new
/// value of. The caller lists those of the argument's shape and dtype, for
/// arguments the rank holds, and none when a step may be skipped (a loss
/// scale keeps the old values).
struct PlannedUpdate {
  int64_t result = -1, argument = -1;
};

/// Sets `completesAt` on every send of `stages` (stage s's program at index
/// s, transfers naming stages by index; a program may be empty): the first
/// position of the sender's program that happens after the peer's wait for
/// the value (the first instruction that reads the received buffer). The
/// proof follows the messages: a rank that waited for a receive knows all
/// the sender knew when it sent (vector clocks over the stages), so a
/// forward's activation is known to have arrived once a later transfer
/// arrives that the peer sent after reading it, whatever the micro-batch
/// or the path (in the interleaved schedule, the activation that went to
/// stage 1 is known received when the next chunk's input comes back from
/// the last stage). A send with no such position keeps -1: it completes at
/// the end of the step.
void planSendCompletions(std::vector<std::vector<PlannedInstruction>> &stages);

/// The static memory plan of one rank's step.
struct StepMemoryPlan {
  /// For each instruction: where the program waits for it (collectives and
  /// transfers; MemoryPlan.h's in-flight rule, a send at its
  /// `completesAt`), or -1 (kernels).
  std::vector<int64_t> waitPoints;
  /// For each buffer: the argument buffer an update result is computed in
  /// (the op making it is the last to read the argument, element by
  /// element), or -1.
  std::vector<int64_t> inPlace;
  /// For each buffer: whether it lives outside the arena for the whole step
  /// (arguments, results, accumulators).
  std::vector<bool> persistent;
  /// The temporaries' arena: a buffer's lifetime runs from the instruction
  /// that makes it to its last reader, or a collective's wait point; a
  /// reshape's result takes its operand's bytes.
  ArenaLayout arena;
};

/// Plans the memory of `program` over `buffers` (the one lifetime analysis
/// of the runtime's Executor and the compile report). Without `withArena`
/// the temporaries are not placed (arena left empty).
StepMemoryPlan planStepMemory(const std::vector<PlannedInstruction> &program,
                              const std::vector<PlannedBuffer> &buffers,
                              const std::vector<PlannedUpdate> &updates,
                              bool withArena = true);

} // namespace trellis

#endif // TRELLIS_COMMON_MEMORYPLAN_H
