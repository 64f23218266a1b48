//===- BlockReduce.cuh - Sums and maxima over a thread block ----*- CUDA
//-*-===//
//
// Row kernels reduce over their block in a fixed tree (shuffles within each
// warp, then the warps' results in warp order), so every run gives the
// same bits. The block's size is a multiple of 32, at most 1024; `shared`
// holds 32 values.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_BLOCKREDUCE_CUH
#define TRELLIS_RUNTIME_CUDA_BLOCKREDUCE_CUH

namespace trellis::runtime::cuda {

/// The sum of `value` over the block (every thread gets it): each warp
/// by shuffles, then the warps' sums in warp order.
__device__ inline double blockSum(double value, double *shared) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < int(blockDim.x / 32); ++w)
    total += shared[w];
  return total;
}

__device__ inline float blockMax(float value, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  float max = shared[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w)
    max = fmaxf(max, shared[w]);
  return max;
}

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_BLOCKREDUCE_CUH
