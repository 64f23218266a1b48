//===- MemoryPlan.cpp - Arena placement and collective windows ------------===//

#include "trellis/Common/MemoryPlan.h"

#include <algorithm>
#include <deque>
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

int64_t placeArena(const std::vector<ArenaBuffer> &buffers,
                   std::vector<int64_t> &offsets) {
  offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return alignedArenaBytes(buffers[a].bytes) >
           alignedArenaBytes(buffers[b].bytes);
  });
  struct Placed {
    int64_t first, last, offset, bytes;
  };
  std::vector<Placed> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;
  int64_t arena = 0;
  for (size_t index : order) {
    const ArenaBuffer &buffer = buffers[index];
    int64_t bytes = alignedArenaBytes(buffer.bytes);
    busy.clear();
    for (const Placed &p : placed)
      if (p.first <= buffer.last && buffer.first <= p.last)
        busy.emplace_back(p.offset, p.offset + p.bytes);
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto &[begin, stop] : busy) {
      if (offset + bytes <= begin)
        break;
      offset = std::max(offset, stop);
    }
    offsets[index] = offset;
    placed.push_back({buffer.first, buffer.last, offset, bytes});
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

} // namespace trellis
