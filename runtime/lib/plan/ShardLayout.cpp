//===- ShardLayout.cpp - Where a rank's shard sits in a global tensor -----===//

#include "trellis/Runtime/ShardLayout.h"

namespace trellis::runtime {

ShardLayout ShardLayout::of(const std::vector<int64_t> &localShape,
                            const std::vector<std::vector<size_t>> &sharding,
                            const Mesh &mesh, int64_t rank,
                            const std::vector<int64_t> &globalShape) {
  ShardLayout layout{localShape, localShape,
                     std::vector<int64_t>(localShape.size(), 0)};
  for (size_t d = 0; d < sharding.size() && d < localShape.size(); ++d) {
    if (sharding[d].empty())
      continue;
    int64_t pieces = mesh.groupSize(sharding[d]);
    int64_t index = mesh.groupPosition(rank, sharding[d]);
    layout.globalShape[d] = localShape[d] * pieces;
    layout.offsets[d] = localShape[d] * index;
  }
  if (globalShape.size() == localShape.size())
    layout.globalShape = globalShape;
  return layout;
}

void ShardLayout::forEach(
    const std::function<void(int64_t, int64_t)> &visit) const {
  size_t rank = localShape.size();
  int64_t total = 1;
  for (int64_t size : localShape)
    total *= size;
  std::vector<int64_t> globalStrides(rank, 1);
  for (size_t d = rank; d-- > 1;)
    globalStrides[d - 1] = globalStrides[d] * globalShape[d];
  std::vector<int64_t> index(rank, 0);
  for (int64_t local = 0; local < total; ++local) {
    int64_t global = 0;
    bool padding = false;
    for (size_t d = 0; d < rank; ++d) {
      padding |= offsets[d] + index[d] >= globalShape[d];
      global += (offsets[d] + index[d]) * globalStrides[d];
    }
    if (!padding)
      visit(local, global);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < localShape[d])
        break;
      index[d] = 0;
    }
  }
}

} // namespace trellis::runtime
