//===- ShardLayout.h - Where a rank's shard sits in a global tensor -*- C++
//-*-===//

#ifndef TRELLIS_RUNTIME_SHARDLAYOUT_H
#define TRELLIS_RUNTIME_SHARDLAYOUT_H

#include "trellis/Common/Mesh.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace trellis::runtime {

/// The box of a global tensor one rank holds: dimension d of the local
/// shard covers [offsets[d], offsets[d] + localShape[d]) of globalShape[d],
/// the part past globalShape[d] being padding (a split that does not
/// divide pads the last pieces).
struct ShardLayout {
  std::vector<int64_t> localShape;
  std::vector<int64_t> globalShape;
  std::vector<int64_t> offsets;

  /// The layout of `rank`'s shard when dimension d is split over the mesh
  /// axes `sharding[d]` (empty `sharding`: replicated), of a global tensor
  /// of `globalShape` (empty: the local shape times the ranks of each
  /// split).
  static ShardLayout of(const std::vector<int64_t> &localShape,
                        const std::vector<std::vector<size_t>> &sharding,
                        const Mesh &mesh, int64_t rank,
                        const std::vector<int64_t> &globalShape = {});

  /// Calls `visit(localIndex, globalIndex)` for every local element that
  /// is not padding, in local row-major order.
  void forEach(const std::function<void(int64_t, int64_t)> &visit) const;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_SHARDLAYOUT_H
