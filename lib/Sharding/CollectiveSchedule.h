//===- CollectiveSchedule.h - Where collectives are issued ------*- C++ -*-===//
//
// The rule that places a partitioned step's collectives so that compute
// hides them, shared by -trellis-schedule-collectives (which reorders the
// step's ops) and the cost query (which prices the order the pass will
// make). The runtime issues a collective where the program has it, on the
// communication stream, and waits for it at its first reader: what runs
// between the two is what hides it.
//
// For each collective, in program order:
//  1. it moves up past the ops before it, as long as it does not read what
//     they make, until it has passed one compute-bound op (the GEMM it
//     then runs beside: Megatron issues the backward's all-gather of a
//     layer's input before the data-gradient GEMM), or meets another
//     collective, an op that communicates itself, or an op of another
//     phase;
//  2. if no compute-bound op then runs between it and its first reader,
//     the nearest compute-bound op before it whose results nothing up to
//     the collective reads moves right after it (Megatron runs the
//     weight-gradient GEMM while the data gradient is reduce-scattered);
//     the search stops at an op that waits for another collective, whose
//     window the op may be hiding.
//
// One compute-bound op each way keeps the memory a moved collective holds
// (a gathered input made one GEMM early) to what Megatron's holds.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_SHARDING_COLLECTIVESCHEDULE_H
#define TRELLIS_LIB_SHARDING_COLLECTIVESCHEDULE_H

#include "trellis/Common/OpContract.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <vector>

namespace trellis::sharding {

/// An op of the step as the rule sees it.
struct ScheduledOp {
  enum class Kind {
    Compute,
    Collective,
    /// Stays in place, and nothing moves past it: an op that communicates
    /// inside its kernel (the runtime waits for every collective there),
    /// a transfer, an op outside the op table.
    Fence,
  };
  Kind kind = Kind::Compute;
  /// Values it reads and makes (ids of the caller's choosing).
  llvm::SmallVector<int64_t, 4> reads, writes;
  /// Compute-bound (isComputeBound): what hides a collective.
  bool heavy = false;
  /// Its phase (phaseGroup): ops move only past ops of their own.
  int64_t group = 0;
};

/// The group of an op of `phase` (its graph.phase: "" for step ops): the
/// forward, the backward with its weight gradients, and the step.
int64_t phaseGroup(llvm::StringRef phase);

/// Whether an op of `cost` is compute-bound: more than 8 FLOPs per byte it
/// moves (a matmul or an attention of any useful size; no elementwise,
/// normalization or layout op).
bool isComputeBound(const OpCost &cost);

/// The order the rule gives `ops` (given in program order): the indices
/// of `ops`, in their new order.
std::vector<int64_t> scheduleCollectives(llvm::ArrayRef<ScheduledOp> ops);

/// For each op of `order` (scheduleCollectives'), whether it is a
/// collective with a compute-bound op of its own action between it and
/// its first reader (or the action's end): `actions[i]` names op i's
/// action (ops of different actions run in different programs).
std::vector<bool> hiddenCollectives(llvm::ArrayRef<ScheduledOp> ops,
                                    llvm::ArrayRef<int64_t> order,
                                    llvm::ArrayRef<int64_t> actions);

} // namespace trellis::sharding

#endif // TRELLIS_LIB_SHARDING_COLLECTIVESCHEDULE_H
