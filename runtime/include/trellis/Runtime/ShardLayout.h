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
/// shard covers [offsets[d], offsets[d] + localShape[d]) of globalShape[d].
struct ShardLayout {
  std::vector<int64_t> localShape;
  std::vector<int64_t> globalShape;
  std::vector<int64_t> offsets;

  /// The layout of `rank`'s shard when dimension d is split over the mesh
  /// axes `sharding[d]` (empty `sharding`: replicated).
  static ShardLayout of(const std::vector<int64_t> &localShape,
                        const std::vector<std::vector<size_t>> &sharding,
                        const Mesh &mesh, int64_t rank);

  /// Calls `visit(localIndex, globalIndex)` for every local element, in
  /// local row-major order.
  void forEach(const std::function<void(int64_t, int64_t)> &visit) const;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_SHARDLAYOUT_H
