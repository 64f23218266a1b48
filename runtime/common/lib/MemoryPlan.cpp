//===- MemoryPlan.cpp - Arena placement and collective windows ------------===//

#include "trellis/Common/MemoryPlan.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

namespace trellis {

std::vector<int64_t> planCollectiveWaits(
    const std::vector<CollectiveWindow> &windows, int64_t end) {
  std::vector<int64_t> waits(windows.size(), end);
  for (size_t i = 0; i < windows.size(); ++i)
    waits[i] = std::min(windows[i].firstReader, end);
  // The collectives in flight, oldest first, and the bytes they touch.
  std::deque<size_t> inFlight;
  int64_t bytes = 0;
  for (size_t j = 0; j < windows.size(); ++j) {
    int64_t issue = windows[j].issue;
    // Those the program waited for by now are done; the stream runs in
    // order, so everything older than a finished one is done too.
    size_t done = 0;
    for (size_t k = 0; k < inFlight.size(); ++k)
      if (waits[inFlight[k]] <= issue)
        done = k + 1;
    for (; done > 0; --done) {
      bytes -= windows[inFlight.front()].bytes;
      inFlight.pop_front();
    }
    while (static_cast<int64_t>(inFlight.size()) >= kMinCollectivesInFlight &&
           bytes + windows[j].bytes > kInFlightCollectiveBytes) {
      waits[inFlight.front()] = issue;
      bytes -= windows[inFlight.front()].bytes;
      inFlight.pop_front();
    }
    inFlight.push_back(j);
    bytes += windows[j].bytes;
  }
  // In order: a collective is done once a later one the program waited for
  // is.
  for (size_t i = windows.size(); i-- > 1;)
    waits[i - 1] = std::min(waits[i - 1], waits[i]);
  return waits;
}

namespace {

/// Disjoint byte ranges [begin, end), adjacent ones joined: where some
/// placed buffers lie.
class ByteRanges {
public:
  void insert(int64_t begin, int64_t end) {
    if (begin >= end)
      return;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin)
      --it;
    while (it != ranges_.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace_hint(it, begin, end);
  }
  using Iterator = std::map<int64_t, int64_t>::const_iterator;
  Iterator begin() const { return ranges_.begin(); }
  Iterator end() const { return ranges_.end(); }

private:
  std::map<int64_t, int64_t> ranges_;
};

/// The placed buffers' byte ranges, found by the instructions they are live
/// at: a segment tree over instruction indices. A lifetime splits into
/// O(log n) canonical nodes. Each node keeps the byte ranges of the buffers
/// that live through its whole range and split there (`covering`), and of
/// buffers that live somewhere in its range (`touching`: those split in
/// its subtree, and those living at its first or last instruction's
/// leaf below it). The buffers live somewhere in a lifetime are those
/// touching one of its canonical nodes or covering a node on the paths from
/// its first and last instructions' leaves to the root (every ancestor of
/// a canonical node is on them): O(log n) range sets, each sorted and
/// joined already, instead of every such buffer's range sorted anew.
class PlacedRanges {
public:
  explicit PlacedRanges(int64_t instructions) {
    while (leaves_ < instructions)
      leaves_ *= 2;
    covering_.resize(2 * leaves_);
    touching_.resize(2 * leaves_);
  }

  void add(int64_t first, int64_t last, int64_t begin, int64_t end) {
    forEachCanonical(first, last, [&](int64_t node) {
      at(covering_, node).insert(begin, end);
      at(touching_, node).insert(begin, end);
    });
    forEachOnPaths(first, last, [&](int64_t node) {
      at(touching_, node).insert(begin, end);
    });
  }

  /// The lowest offset, 0 or the end of some range live in [first, last],
  /// where `bytes` fit below every such range that begins after it.
  int64_t firstFit(int64_t first, int64_t last, int64_t bytes) {
    sets_.clear();
    forEachCanonical(first, last, [&](int64_t node) {
      if (touching_[node])
        sets_.push_back(touching_[node].get());
    });
    forEachOnPaths(first, last, [&](int64_t node) {
      if (covering_[node])
        sets_.push_back(covering_[node].get());
    });
    // The ranges of all sets in the order they begin (a heap of each
    // set's next), until the buffer fits below the next one.
    heap_.clear();
    for (const ByteRanges *set : sets_)
      if (set->begin() != set->end())
        heap_.push_back({set->begin(), set->end()});
    auto later = [](const Cursor &a, const Cursor &b) {
      return a.next->first > b.next->first;
    };
    std::make_heap(heap_.begin(), heap_.end(), later);
    int64_t offset = 0;
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      Cursor &cursor = heap_.back();
      if (offset + bytes <= cursor.next->first)
        break;
      offset = std::max(offset, cursor.next->second);
      if (++cursor.next == cursor.stop)
        heap_.pop_back();
      else
        std::push_heap(heap_.begin(), heap_.end(), later);
    }
    return offset;
  }

private:
  struct Cursor {
    ByteRanges::Iterator next, stop;
  };

  static ByteRanges &at(std::vector<std::unique_ptr<ByteRanges>> &nodes,
                        int64_t node) {
    if (!nodes[node])
      nodes[node] = std::make_unique<ByteRanges>();
    return *nodes[node];
  }

  /// Calls `visit(node)` for the canonical nodes of [first, last].
  template <typename Visit>
  void forEachCanonical(int64_t first, int64_t last, Visit visit) const {
    for (int64_t lo = first + leaves_, hi = last + leaves_ + 1; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        visit(lo++);
      if (hi & 1)
        visit(--hi);
    }
  }

  /// Calls `visit(node)` once for each node on the paths from the leaves
  /// of `first` and `last` to the root.
  template <typename Visit>
  void forEachOnPaths(int64_t first, int64_t last, Visit visit) const {
    for (int64_t a = first + leaves_, b = last + leaves_; a >= 1;
         a /= 2, b /= 2) {
      visit(a);
      if (b != a)
        visit(b);
    }
  }

  int64_t leaves_ = 1;
  std::vector<std::unique_ptr<ByteRanges>> covering_, touching_;
  std::vector<const ByteRanges *> sets_;
  std::vector<Cursor> heap_;
};

} // namespace

int64_t placeArena(const std::vector<ArenaBuffer> &buffers,
                   std::vector<int64_t> &offsets) {
  offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    int64_t sizeA = alignedArenaBytes(buffers[a].bytes);
    int64_t sizeB = alignedArenaBytes(buffers[b].bytes);
    if (sizeA != sizeB)
      return sizeA > sizeB;
    if (buffers[a].first != buffers[b].first)
      return buffers[a].first < buffers[b].first;
    return buffers[a].last < buffers[b].last;
  });
  int64_t instructions = 1;
  for (const ArenaBuffer &buffer : buffers)
    instructions =
        std::max(instructions, std::max(buffer.first, buffer.last) + 1);
  PlacedRanges placed(instructions);
  int64_t arena = 0;
  for (size_t index : order) {
    const ArenaBuffer &buffer = buffers[index];
    int64_t bytes = alignedArenaBytes(buffer.bytes);
    int64_t last = std::max(buffer.first, buffer.last);
    int64_t offset = placed.firstFit(buffer.first, last, bytes);
    offsets[index] = offset;
    placed.add(buffer.first, last, offset, offset + bytes);
    arena = std::max(arena, offset + bytes);
  }
  return arena;
}

ArenaLayout
layOutArena(std::vector<BufferSpan> buffers,
            const std::vector<std::pair<int64_t, int64_t>> &aliases) {
  size_t count = buffers.size();
  std::vector<int64_t> root(count);
  for (size_t b = 0; b < count; ++b)
    root[b] = static_cast<int64_t>(b);
  auto temporary = [&](int64_t b) {
    return !buffers[b].persistent && buffers[b].first >= 0;
  };
  for (const auto &[from, to] : aliases) {
    if (!temporary(from) || !temporary(to) || root[to] != to)
      continue;
    int64_t shared = root[from];
    root[to] = shared;
    buffers[shared].first = std::min(buffers[shared].first, buffers[to].first);
    buffers[shared].last = std::max(buffers[shared].last, buffers[to].last);
  }
  std::vector<int64_t> placedBuffers;
  std::vector<ArenaBuffer> spans;
  for (size_t b = 0; b < count; ++b)
    if (temporary(b) && root[b] == static_cast<int64_t>(b)) {
      placedBuffers.push_back(static_cast<int64_t>(b));
      spans.push_back({buffers[b].bytes, buffers[b].first, buffers[b].last});
    }
  ArenaLayout layout;
  layout.offsets.assign(count, -1);
  std::vector<int64_t> offsets;
  layout.bytes = placeArena(spans, offsets);
  for (size_t i = 0; i < placedBuffers.size(); ++i)
    layout.offsets[placedBuffers[i]] = offsets[i];
  for (size_t b = 0; b < count; ++b)
    if (root[b] != static_cast<int64_t>(b))
      layout.offsets[b] = layout.offsets[root[b]];
  return layout;
}

namespace {

bool isTransfer(const OpContract *contract) {
  return contract && contract->family == OpFamily::PointToPoint;
}

bool isSend(const OpContract *contract) {
  return contract && contract->collectiveKind() == CollectiveKind::Send;
}

/// The first instruction after `at` that reads one of its outputs (or,
/// with `orCommunicating`, whose kernel communicates: a split loss must not
/// run while the communication stream does; other split ops such as rope
/// or attention blocks only read their place); the program's size if none.
int64_t firstReader(const std::vector<PlannedInstruction> &program, int64_t at,
                    bool orCommunicating) {
  const std::vector<int64_t> &outputs = program[at].outputs;
  int64_t count = static_cast<int64_t>(program.size());
  for (int64_t j = at + 1; j < count; ++j) {
    if (orCommunicating && program[j].communicates)
      return j;
    for (int64_t input : program[j].inputs)
      if (std::find(outputs.begin(), outputs.end(), input) != outputs.end())
        return j;
  }
  return count;
}

/// Where the program waits for each collective and transfer.
std::vector<int64_t>
planWaitPoints(const std::vector<PlannedInstruction> &program,
               const std::vector<PlannedBuffer> &buffers) {
  int64_t count = static_cast<int64_t>(program.size());
  std::vector<int64_t> waits(program.size(), -1);
  // Collectives of the communication stream: waited for at their first
  // reader, or when too many are in flight. Receives wait for their first
  // reader alone: transfers go over their own group, so they neither wait
  // for collectives nor make them wait.
  std::vector<CollectiveWindow> windows;
  std::vector<size_t> windowOf;
  for (int64_t i = 0; i < count; ++i) {
    const PlannedInstruction &instruction = program[i];
    const OpContract *contract = instruction.contract;
    // Sends: below, once the receives have theirs.
    if (!contract || !contract->collective || isSend(contract))
      continue;
    bool transfer = isTransfer(contract);
    int64_t wait = firstReader(program, i, /*orCommunicating=*/!transfer);
    waits[i] = wait;
    if (transfer)
      continue;
    const std::vector<int64_t> &outputs = instruction.outputs;
    int64_t bytes = 0;
    for (int64_t b : instruction.inputs)
      bytes += buffers[b].bytes;
    for (int64_t b : outputs)
      bytes += buffers[b].bytes;
    windows.push_back({i, wait, bytes});
    windowOf.push_back(i);
  }
  std::vector<int64_t> collectiveWaits = planCollectiveWaits(windows, count);
  for (size_t w = 0; w < windows.size(); ++w)
    waits[windowOf[w]] = collectiveWaits[w];
  // A send completes once its peer is known to have received it
  // (planSendCompletions), else by the end of the step.
  for (int64_t i = 0; i < count; ++i)
    if (isSend(program[i].contract))
      waits[i] = program[i].completesAt > i ? program[i].completesAt : count;
  return waits;
}

/// Which update results are computed in their argument's bytes: the result
/// is written once, by the last instruction to read the argument (no
/// collective still reading it), which reads it as the operand the result
/// replaces.
std::vector<int64_t>
planInPlaceUpdates(const std::vector<PlannedInstruction> &program,
                   const std::vector<PlannedBuffer> &buffers,
                   const std::vector<PlannedUpdate> &updates,
                   const std::vector<int64_t> &waits) {
  size_t count = program.size();
  std::vector<int64_t> inPlace(buffers.size(), -1);
  std::vector<int64_t> writes(buffers.size(), 0), writer(buffers.size(), -1);
  for (size_t i = 0; i < count; ++i)
    for (int64_t b : program[i].outputs) {
      ++writes[b];
      writer[b] = static_cast<int64_t>(i);
    }
  std::vector<bool> taken(buffers.size(), false);
  for (size_t b = 0; b < buffers.size(); ++b)
    taken[b] = buffers[b].kind == PlannedBuffer::Kind::Argument;
  // The reads of each argument an update may replace: (instruction,
  // operand), in program order.
  std::vector<bool> replaced(buffers.size(), false);
  for (const PlannedUpdate &update : updates)
    replaced[update.argument] = true;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> reads(buffers.size());
  for (size_t i = 0; i < count; ++i) {
    const std::vector<int64_t> &inputs = program[i].inputs;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (replaced[inputs[k]])
        reads[inputs[k]].emplace_back(i, k);
  }
  for (const PlannedUpdate &update : updates) {
    int64_t from = update.result, into = update.argument;
    if (writes[from] != 1 || taken[from] || writes[into] != 0 ||
        buffers[from].bytes != buffers[into].bytes)
      continue;
    int64_t at = writer[from];
    const PlannedInstruction &made = program[at];
    bool safe = true;
    for (auto [i, k] : reads[into]) {
      if (i == at) {
        size_t output =
            std::find(made.outputs.begin(), made.outputs.end(), from) -
            made.outputs.begin();
        safe = made.contract && made.contract->replacedOperand(output) == k;
      } else {
        // A collective or transfer reads until the program waits for it.
        safe = std::max<int64_t>(i, waits[i]) < at;
      }
      if (!safe)
        break;
    }
    if (safe) {
      inPlace[from] = into;
      taken[from] = true;
    }
  }
  return inPlace;
}

} // namespace

void planSendCompletions(std::vector<std::vector<PlannedInstruction>> &stages) {
  int64_t stageCount = static_cast<int64_t>(stages.size());
  // Where each channel's value is sent (stage, position) and where its
  // receiver waits for it; a receive's wait is a sync point of its stage.
  struct Sync {
    int64_t at;      // The wait's position in the receiver's program.
    int64_t channel; // The receive's channel.
  };
  std::map<int64_t, std::pair<int64_t, int64_t>> sentAt, waitedAt;
  std::vector<std::vector<Sync>> syncs(stageCount);
  for (int64_t s = 0; s < stageCount; ++s) {
    const std::vector<PlannedInstruction> &program = stages[s];
    for (int64_t i = 0; i < static_cast<int64_t>(program.size()); ++i) {
      const PlannedInstruction &instruction = program[i];
      if (!isTransfer(instruction.contract) || instruction.channel < 0)
        continue;
      if (isSend(instruction.contract)) {
        sentAt[instruction.channel] = {s, i};
        continue;
      }
      int64_t wait = firstReader(program, i, /*orCommunicating=*/false);
      waitedAt[instruction.channel] = {s, wait};
      syncs[s].push_back({wait, instruction.channel});
    }
    std::stable_sort(syncs[s].begin(), syncs[s].end(),
                     [](const Sync &a, const Sync &b) { return a.at < b.at; });
  }
  // Vector clocks: after the k-th sync of stage s, the last position of
  // each stage known to have happened (own entry: the sync's position).
  // A sync merges the clock of its sender at the send; that clock is known
  // once the sender has merged every sync up to the send's position.
  std::vector<std::vector<std::vector<int64_t>>> clocks(stageCount);
  std::vector<size_t> merged(stageCount, 0);
  auto clockAt = [&](int64_t s, int64_t position) {
    std::vector<int64_t> clock(stageCount, -1);
    auto after = std::upper_bound(
        syncs[s].begin(), syncs[s].begin() + merged[s], position,
        [](int64_t at, const Sync &sync) { return at < sync.at; });
    if (after != syncs[s].begin())
      clock = clocks[s][after - syncs[s].begin() - 1];
    clock[s] = position;
    return clock;
  };
  auto knownAt = [&](int64_t s, int64_t position) {
    return merged[s] == syncs[s].size() || syncs[s][merged[s]].at > position;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < stageCount; ++s)
      for (; merged[s] < syncs[s].size(); ++merged[s]) {
        const Sync &sync = syncs[s][merged[s]];
        std::vector<int64_t> clock = clockAt(s, sync.at);
        auto sender = sentAt.find(sync.channel);
        if (sender != sentAt.end() && sender->second.first != s) {
          auto [from, position] = sender->second;
          if (!knownAt(from, position))
            break;
          std::vector<int64_t> theirs = clockAt(from, position);
          for (int64_t t = 0; t < stageCount; ++t)
            clock[t] = std::max(clock[t], theirs[t]);
        }
        clocks[s].push_back(std::move(clock));
        progress = true;
      }
  }
  // Stages left waiting (transfers no schedule can run) know nothing more:
  // their sends complete at the end of the step.
  for (int64_t s = 0; s < stageCount; ++s) {
    std::vector<PlannedInstruction> &program = stages[s];
    for (int64_t i = 0; i < static_cast<int64_t>(program.size()); ++i) {
      PlannedInstruction &send = program[i];
      if (!isSend(send.contract))
        continue;
      send.completesAt = -1;
      auto received = waitedAt.find(send.channel);
      if (received == waitedAt.end() || received->second.first != send.peer ||
          send.peer < 0 || send.peer >= stageCount)
        continue;
      int64_t peer = send.peer, wait = received->second.second;
      // The first merged sync after the send whose clock has seen the wait
      // (clocks only grow).
      const std::vector<Sync> &own = syncs[s];
      size_t after = std::upper_bound(own.begin(), own.begin() + merged[s], i,
                                      [](int64_t at, const Sync &sync) {
                                        return at < sync.at;
                                      }) -
                     own.begin();
      auto seen =
          std::partition_point(clocks[s].begin() + after, clocks[s].end(),
                               [&](const std::vector<int64_t> &clock) {
                                 return clock[peer] < wait;
                               });
      if (seen != clocks[s].end())
        send.completesAt = own[seen - clocks[s].begin()].at;
    }
  }
}

StepMemoryPlan planStepMemory(const std::vector<PlannedInstruction> &program,
                              const std::vector<PlannedBuffer> &buffers,
                              const std::vector<PlannedUpdate> &updates,
                              bool withArena) {
  StepMemoryPlan plan;
  plan.waitPoints = planWaitPoints(program, buffers);
  plan.inPlace = planInPlaceUpdates(program, buffers, updates, plan.waitPoints);
  if (!withArena)
    return plan;
  size_t count = buffers.size();
  std::vector<BufferSpan> spans(count);
  plan.persistent.assign(count, false);
  for (size_t b = 0; b < count; ++b) {
    spans[b].bytes = buffers[b].bytes;
    plan.persistent[b] = buffers[b].kind != PlannedBuffer::Kind::Temporary;
  }
  // Accumulators take a value from every micro-batch of the step.
  for (const PlannedInstruction &instruction : program)
    if (instruction.contract && instruction.contract->effects.accumulates)
      plan.persistent[instruction.outputs[0]] = true;
  for (size_t b = 0; b < count; ++b)
    spans[b].persistent = plan.persistent[b];
  // Lifetimes in instruction indices, inclusive: an instruction's outputs
  // never share bytes with its inputs.
  std::vector<int64_t> writes(count, 0);
  for (size_t i = 0; i < program.size(); ++i) {
    int64_t at = static_cast<int64_t>(i);
    // A collective in flight touches its buffers until its wait point.
    int64_t end = std::max(at, plan.waitPoints[i]);
    for (int64_t output : program[i].outputs) {
      ++writes[output];
      if (spans[output].first < 0)
        spans[output].first = at;
      spans[output].last = std::max(spans[output].last, end);
    }
    for (int64_t input : program[i].inputs)
      spans[input].last = std::max(spans[input].last, end);
  }
  // The result of an op that shares its operand's bytes (a reshape: the op
  // contract says so) takes them when both are written once.
  std::vector<std::pair<int64_t, int64_t>> aliases;
  for (const PlannedInstruction &instruction : program)
    if (instruction.contract &&
        instruction.contract->effects.sharesOperandBytes &&
        writes[instruction.inputs[0]] == 1 &&
        writes[instruction.outputs[0]] == 1)
      aliases.emplace_back(instruction.inputs[0], instruction.outputs[0]);
  plan.arena = layOutArena(std::move(spans), aliases);
  return plan;
}

} // namespace trellis
