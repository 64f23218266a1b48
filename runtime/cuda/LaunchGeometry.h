//===- LaunchGeometry.h - Grids of the CUDA backend's kernels ---*- C++ -*-===//
//
// Every elementwise kernel of the backend is a grid-stride loop: thread t
// of the grid handles elements t, t + T, t + 2T, ... (T the grid's
// threads), so any grid covers every element once and the grid can stay
// within the device's limits for any size. Row kernels (norms, softmax,
// cross-entropy) give each block rows r, r + B, ... of a grid of B blocks.
// Plain C++: the CPU tests walk these loops for tail sizes.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_LAUNCHGEOMETRY_H
#define TRELLIS_RUNTIME_CUDA_LAUNCHGEOMETRY_H

#include <algorithm>
#include <cstdint>

namespace trellis::runtime::cuda {

/// Threads per block of elementwise kernels.
constexpr int kElementwiseThreads = 256;
/// Blocks at most: enough to fill an H200's 132 SMs many times over; the
/// grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 132 * 32;

struct LaunchGeometry {
  int64_t blocks = 1;
  int threads = kElementwiseThreads;
};

/// The grid for `elements` elements (at least one block, so a launch over
/// no elements is still valid and does nothing).
inline LaunchGeometry elementwiseGeometry(int64_t elements,
                                          int threads = kElementwiseThreads) {
  LaunchGeometry geometry;
  geometry.threads = threads;
  geometry.blocks =
      std::clamp<int64_t>((elements + threads - 1) / threads, 1, kMaxBlocks);
  return geometry;
}

/// The grid for `rows` rows, one block working on a row at a time.
inline LaunchGeometry rowGeometry(int64_t rows, int threads) {
  LaunchGeometry geometry;
  geometry.threads = threads;
  geometry.blocks = std::clamp<int64_t>(rows, 1, kMaxBlocks);
  return geometry;
}

/// Threads per block for rows of `columns` elements: a multiple of a warp,
/// at most 1024, no more than the row needs.
inline int rowThreads(int64_t columns) {
  int64_t warps = std::clamp<int64_t>((columns + 31) / 32, 1, 32);
  return static_cast<int>(warps * 32);
}

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_LAUNCHGEOMETRY_H
