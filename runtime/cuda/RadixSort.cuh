//===- RadixSort.cuh - Sizing CUB's stable radix sort -----------*- C++ -*-===//
//
// The backend sorts (key, value) pairs of int32 with CUB's stable radix
// sort (the embedding gradient's tokens by id, the expert products' slots
// by expert or by member); each first asks CUB how much scratch it needs.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_RADIXSORT_CUH
#define TRELLIS_RUNTIME_CUDA_RADIXSORT_CUH

#include "CudaSupport.h"

#include <cub/device/device_radix_sort.cuh>

#include <string>

namespace trellis::runtime::cuda {

/// Sets `bytes` to the scratch a stable sort of `count` int32 pairs by the
/// key bits [0, endBit) takes on `stream`.
inline Status radixSortBytes(int64_t count, int endBit, cudaStream_t stream,
                             size_t &bytes, const std::string &what) {
  bytes = 0;
  TRELLIS_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
                                   nullptr, bytes,
                                   static_cast<const int32_t *>(nullptr),
                                   static_cast<int32_t *>(nullptr),
                                   static_cast<const int32_t *>(nullptr),
                                   static_cast<int32_t *>(nullptr),
                                   static_cast<int>(count), 0, endBit, stream),
                               what);
  return Status::success();
}

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_RADIXSORT_CUH
