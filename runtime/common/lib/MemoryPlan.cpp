//===- MemoryPlan.cpp - Arena placement and collective windows ------------===//

#include "trellis/Common/MemoryPlan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace trellis {

std::vector<int64_t> planCollectiveWaits(
    const std::vector<CollectiveWindow> &windows, int64_t end) {
  std::vector<int64_t> waits(windows.size(), end);
  for (size_t i = 0; i < windows.size(); ++i) {
    int64_t wait = std::min(windows[i].firstReader, end);
    size_t bound = i + kMaxCollectivesInFlight;
    if (bound < windows.size())
      wait = std::min(wait, windows[bound].issue);
    waits[i] = wait;
  }
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

} // namespace trellis
