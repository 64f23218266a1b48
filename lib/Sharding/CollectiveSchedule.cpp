//===- CollectiveSchedule.cpp - Where collectives are issued --------------===//

#include "CollectiveSchedule.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>

namespace trellis::sharding {

namespace {

bool readsAny(const ScheduledOp &op, llvm::ArrayRef<int64_t> values) {
  return llvm::any_of(
      op.reads, [&](int64_t read) { return llvm::is_contained(values, read); });
}

/// Moves the op at `from` to `to` (the others keep their order), and
/// updates `positions` (each op's place in `order`) for those that moved.
void move(std::vector<int64_t> &order, std::vector<size_t> &positions,
          size_t from, size_t to) {
  int64_t op = order[from];
  if (from < to)
    std::copy(order.begin() + from + 1, order.begin() + to + 1,
              order.begin() + from);
  else
    std::copy_backward(order.begin() + to, order.begin() + from,
                       order.begin() + from + 1);
  order[to] = op;
  for (size_t at = std::min(from, to); at <= std::max(from, to); ++at)
    positions[order[at]] = at;
}

} // namespace

int64_t phaseGroup(llvm::StringRef phase) {
  if (phase == "forward")
    return 0;
  if (phase == "backward" || phase == "weight")
    return 1;
  return 2;
}

bool isComputeBound(const OpCost &cost) {
  return cost.flops >
         8.0 * static_cast<double>(cost.bytesRead + cost.bytesWritten);
}

std::vector<int64_t> scheduleCollectives(llvm::ArrayRef<ScheduledOp> ops) {
  using Kind = ScheduledOp::Kind;
  std::vector<int64_t> order(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    order[i] = static_cast<int64_t>(i);
  std::vector<size_t> positions(ops.size());
  for (size_t at = 0; at < order.size(); ++at)
    positions[order[at]] = at;
  // Ops that wait for a collective (read what one makes).
  llvm::DenseSet<int64_t> collected;
  for (const ScheduledOp &op : ops)
    if (op.kind == Kind::Collective)
      collected.insert(op.writes.begin(), op.writes.end());
  std::vector<bool> waits(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i)
    waits[i] = llvm::any_of(
        ops[i].reads, [&](int64_t read) { return collected.contains(read); });
  for (size_t index = 0; index < ops.size(); ++index) {
    const ScheduledOp &collective = ops[index];
    if (collective.kind != Kind::Collective)
      continue;
    // 1. Up past the ops before it, through one compute-bound op.
    size_t at = positions[index], to = at;
    while (to > 0) {
      const ScheduledOp &before = ops[order[to - 1]];
      if (before.kind != Kind::Compute || before.group != collective.group ||
          llvm::any_of(before.writes, [&](int64_t value) {
            return llvm::is_contained(collective.reads, value);
          }))
        break;
      --to;
      if (before.heavy)
        break;
    }
    if (to != at) {
      move(order, positions, at, to);
      at = to;
    }
    // 2. A compute-bound op already between it and its first reader?
    bool hidden = false;
    for (size_t next = at + 1; next < order.size() && !hidden; ++next) {
      const ScheduledOp &op = ops[order[next]];
      if (readsAny(op, collective.writes) || op.kind == Kind::Fence)
        break;
      hidden = op.heavy && op.group == collective.group;
    }
    if (!hidden) {
      // The nearest compute-bound op before it that nothing up to it
      // reads, moved right after it; not from before a wait for another
      // collective (the op may be what hides that one).
      for (size_t candidate = at; candidate-- > 0;) {
        const ScheduledOp &op = ops[order[candidate]];
        if (op.kind != Kind::Compute || op.group != collective.group ||
            waits[order[candidate]])
          break;
        if (!op.heavy)
          continue;
        bool readBefore = false;
        for (size_t between = candidate + 1; between <= at && !readBefore;
             ++between)
          readBefore = readsAny(ops[order[between]], op.writes);
        if (readBefore)
          continue;
        move(order, positions, candidate, at);
        break;
      }
    }
  }
  return order;
}

std::vector<bool> hiddenCollectives(llvm::ArrayRef<ScheduledOp> ops,
                                    llvm::ArrayRef<int64_t> order,
                                    llvm::ArrayRef<int64_t> actions) {
  std::vector<bool> hidden(ops.size(), false);
  for (size_t at = 0; at < order.size(); ++at) {
    int64_t index = order[at];
    const ScheduledOp &collective = ops[index];
    if (collective.kind != ScheduledOp::Kind::Collective)
      continue;
    for (size_t next = at + 1; next < order.size(); ++next) {
      const ScheduledOp &op = ops[order[next]];
      if (readsAny(op, collective.writes) ||
          op.kind == ScheduledOp::Kind::Fence)
        break;
      if (op.heavy && actions[order[next]] == actions[index]) {
        hidden[index] = true;
        break;
      }
    }
  }
  return hidden;
}

} // namespace trellis::sharding
