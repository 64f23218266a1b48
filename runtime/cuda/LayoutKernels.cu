//===- LayoutKernels.cu - Reshape, transpose, slice, pad, concat ----------===//
//
// One strided move, as the CPU's (runtime/cpu/Layout.cpp): a walk over a
// dense index space `shape`, each index's strided offset base +
// sum(coordinate[d] * strides[d]); a gather writes out[dense] =
// in[strided], a scatter out[strided] = in[dense]. transpose, slice and
// broadcast_to gather; pad zeroes and scatters into the box at `low`;
// concat scatters each input at its offset along the dimension; a reshape
// that does not share its operand's bytes copies them. Elements move as
// unsigned integers of their width, so every dtype goes alike.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "LaunchGeometry.h"

#include "trellis/Runtime/OpShapes.h"

#include <cstdint>
#include <string>

namespace trellis::runtime::cuda {

namespace {

constexpr int kMaxRank = 8;

struct StridedWalk {
  int rank = 0;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxRank];
  int64_t base = 0;
};

template <typename T>
__global__ void moveStridedKernel(StridedWalk walk, const T *in, T *out,
                                  bool gather, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, strided = walk.base;
    for (int d = walk.rank - 1; d >= 0; --d) {
      strided += (rest % walk.shape[d]) * walk.strides[d];
      rest /= walk.shape[d];
    }
    if (gather)
      out[i] = in[strided];
    else
      out[strided] = in[i];
  }
}

Status moveStrided(const Tensor &in, Tensor &out,
                   const std::vector<int64_t> &shape,
                   const std::vector<int64_t> &strides, int64_t base,
                   bool gather, cudaStream_t stream) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    return Status::error("cuda: layout moves of rank " +
                         std::to_string(shape.size()) + " (more than " +
                         std::to_string(kMaxRank) + ") are not supported");
  StridedWalk walk;
  walk.rank = static_cast<int>(shape.size());
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    walk.shape[d] = shape[d];
    walk.strides[d] = strides[d];
    count *= shape[d];
  }
  walk.base = base;
  if (count == 0)
    return Status::success();
  LaunchGeometry grid = elementwiseGeometry(count);
  if (dtypeBytes(in.desc().dtype) == 2)
    moveStridedKernel<<<grid.blocks, grid.threads, 0, stream>>>(
        walk, static_cast<const uint16_t *>(in.raw()),
        static_cast<uint16_t *>(out.raw()), gather, count);
  else
    moveStridedKernel<<<grid.blocks, grid.threads, 0, stream>>>(
        walk, static_cast<const uint32_t *>(in.raw()),
        static_cast<uint32_t *>(out.raw()), gather, count);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching a layout move");
  return Status::success();
}

Status runLayout(const KernelArgs &args, CudaContext &context) {
  LayoutKind kind = *rowOf(args).memberAs<LayoutKind>();
  const LayoutParameters &parameters = parametersOf<LayoutParameters>(args);
  cudaStream_t stream = context.stream;
  Tensor &out = args.out(0);
  const Tensor &in = args.in(0);
  if (kind == LayoutKind::Reshape) {
    // Usually the arena gives the result its operand's bytes: nothing moves.
    if (out.raw() != in.raw())
      TRELLIS_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(out.raw(), in.raw(), in.bytes(),
                          cudaMemcpyDeviceToDevice, stream),
          "copying a reshape");
    return Status::success();
  }
  if (kind == LayoutKind::Transpose) {
    std::vector<int64_t> inStrides = rowMajorStrides(in.shape()), strides;
    for (int64_t d : parameters.permutation)
      strides.push_back(inStrides[d]);
    return moveStrided(in, out, out.shape(), strides, 0, true, stream);
  }
  if (kind == LayoutKind::Slice) {
    std::vector<int64_t> strides = rowMajorStrides(in.shape());
    const std::vector<int64_t> &offsets = parameters.offsets;
    int64_t base = 0;
    for (size_t d = 0; d < offsets.size(); ++d)
      base += offsets[d] * strides[d];
    return moveStrided(in, out, out.shape(), strides, base, true, stream);
  }
  if (kind == LayoutKind::Pad) {
    // Zero bits are 0.0 in every float dtype.
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(out.raw(), 0, out.bytes(), stream), "zeroing a pad");
    std::vector<int64_t> outStrides = rowMajorStrides(out.shape());
    const std::vector<int64_t> &low = parameters.low;
    int64_t base = 0;
    for (size_t d = 0; d < low.size(); ++d)
      base += low[d] * outStrides[d];
    return moveStrided(in, out, in.shape(), outStrides, base, false, stream);
  }
  if (kind == LayoutKind::Concat) {
    int64_t dim = parameters.dim;
    std::vector<int64_t> outStrides = rowMajorStrides(out.shape());
    int64_t offset = 0;
    for (size_t i = 0; i < args.instruction.inputs.size(); ++i) {
      const Tensor &piece = args.in(i);
      TRELLIS_RETURN_IF_ERROR(moveStrided(piece, out, piece.shape(), outStrides,
                                          offset * outStrides[dim], false,
                                          stream));
      offset += piece.shape()[dim];
    }
    return Status::success();
  }
  // broadcast_to: right-aligned, stride 0 along broadcast dimensions.
  return moveStrided(in, out, out.shape(),
                     broadcastStrides(in.shape(), out.shape().size()), 0, true,
                     stream);
}

} // namespace

void registerLayoutKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::Layout, {runLayout});
}

} // namespace trellis::runtime::cuda
