//===- ReduceKernels.cu - Reductions and finiteness flags -----------------===//
//
// reduce_sum, reduce_mean and reduce_max over any dimensions, the
// collective lowering's
// elementwise reduction step (a reduce_scatter's ordered sum of pieces),
// and the step's one finiteness verdict.
//
// A reduction's order depends on its shape alone, so every run gives the
// same bits: each result element's reduced elements, in row-major order,
// are cut into parts of a length the shape fixes (about the square root of
// their count); a thread sums each part, then a thread per result element
// combines its parts in order. Long reductions (a bias gradient's 8192
// rows) thus run as two short ones over many threads.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "LaunchGeometry.h"

#include "DeviceFloat.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

namespace trellis::runtime::cuda {

namespace {

template <typename T>
__global__ void reduceKernel(int kind, T *target, const T *a, const T *b,
                             int64_t count) {
  int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += grid) {
    float x = widen(a[i]), y = widen(b[i]);
    float value = kind == 0 ? x + y : kind == 1 ? fmaxf(x, y) : fminf(x, y);
    target[i] = narrow<T>(value);
  }
}

__global__ void reduceInt32Kernel(int kind, int32_t *target, const int32_t *a,
                                  const int32_t *b, int64_t count) {
  int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += grid) {
    int32_t x = a[i], y = b[i];
    target[i] = kind == 0 ? x + y : kind == 1 ? max(x, y) : min(x, y);
  }
}

template <typename T>
__global__ void nonFiniteKernel(const T *values, int64_t count, int32_t index,
                                int32_t *flag) {
  // Tensors are tested in order on one stream: once an earlier one set
  // the flag, later ones leave it.
  if (*flag != 0)
    return;
  int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += grid)
    if (!isfinite(widen(values[i]))) {
      atomicCAS(flag, 0, index);
      return;
    }
}

constexpr int kMaxRank = 8;

/// The input's dimensions split into those the result keeps and those it
/// reduces, each with its sizes and input strides.
struct ReduceLayout {
  int keptRank = 0, reducedRank = 0;
  int64_t keptShape[kMaxRank], keptStrides[kMaxRank];
  int64_t reducedShape[kMaxRank], reducedStrides[kMaxRank];
  int64_t reduced = 1;
};

/// The reduced elements of each result element are cut into parts of
/// `part` elements: a part's sum (kind 0, 1) or maximum (2) goes to
/// partials[p * count + o] (adjacent threads: adjacent results).
template <typename T>
__global__ void reducePartsKernel(int kind, ReduceLayout layout, const T *in,
                                  float *partials, int64_t count, int64_t part,
                                  int64_t parts) {
  int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       t < count * parts; t += grid) {
    int64_t o = t % count, p = t / count;
    int64_t rest = o, base = 0;
    for (int d = layout.keptRank - 1; d >= 0; --d) {
      base += (rest % layout.keptShape[d]) * layout.keptStrides[d];
      rest /= layout.keptShape[d];
    }
    float total = kind == 2 ? -INFINITY : 0.0f;
    int64_t end = min(layout.reduced, (p + 1) * part);
    if (layout.reducedRank == 1) {
      // One reduced dimension (merged where contiguous): no division per
      // element.
      int64_t stride = layout.reducedStrides[0];
      for (int64_t r = p * part; r < end; ++r) {
        float value = widen(in[base + r * stride]);
        total = kind == 2 ? fmaxf(total, value) : total + value;
      }
    } else {
      for (int64_t r = p * part; r < end; ++r) {
        int64_t within = r, offset = base;
        for (int d = layout.reducedRank - 1; d >= 0; --d) {
          offset +=
              (within % layout.reducedShape[d]) * layout.reducedStrides[d];
          within /= layout.reducedShape[d];
        }
        float value = widen(in[offset]);
        total = kind == 2 ? fmaxf(total, value) : total + value;
      }
    }
    partials[t] = total;
  }
}

/// out[o] = the parts of result o combined in order (mean: over `reduced`).
template <typename T>
__global__ void combinePartsKernel(int kind, const float *partials, T *out,
                                   int64_t count, int64_t parts,
                                   int64_t reduced) {
  int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < count;
       o += grid) {
    float total = kind == 2 ? -INFINITY : 0.0f;
    for (int64_t p = 0; p < parts; ++p) {
      float value = partials[p * count + o];
      total = kind == 2 ? fmaxf(total, value) : total + value;
    }
    if (kind == 1)
      total /= static_cast<float>(reduced);
    out[o] = narrow<T>(total);
  }
}

/// The part length of a reduction of `reduced` elements: the power of two
/// nearest above its square root, at least 32.
int64_t partLength(int64_t reduced) {
  int64_t part = 32;
  while (part * part < reduced)
    part *= 2;
  return part;
}

Status runReduceDims(const KernelArgs &args, CudaContext &context) {
  const Tensor &in = args.in(0);
  Tensor &out = args.out(0);
  const std::vector<int64_t> &shape = in.shape();
  const std::vector<int64_t> &dims =
      parametersOf<ReductionParameters>(args).dims;
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims)
    reduced[d < 0 ? d + static_cast<int64_t>(shape.size()) : d] = true;
  ReduceLayout layout;
  if (shape.size() > static_cast<size_t>(kMaxRank))
    return Status::error("cuda: reductions of rank " +
                         std::to_string(shape.size()) + " (more than " +
                         std::to_string(kMaxRank) + ") are not supported");
  int64_t stride = 1;
  std::vector<int64_t> strides(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  // Neighbouring dimensions of one kind merge (row-major strides: the
  // outer one's stride is the inner one's extent), so a bias gradient's
  // [batch, seq, features] reduced over batch and seq is one reduced
  // dimension.
  for (size_t d = 0; d < shape.size(); ++d) {
    bool mergeReduced = reduced[d] && d > 0 && reduced[d - 1];
    bool mergeKept = !reduced[d] && d > 0 && !reduced[d - 1];
    if (reduced[d]) {
      if (mergeReduced) {
        layout.reducedShape[layout.reducedRank - 1] *= shape[d];
        layout.reducedStrides[layout.reducedRank - 1] = strides[d];
      } else {
        layout.reducedShape[layout.reducedRank] = shape[d];
        layout.reducedStrides[layout.reducedRank++] = strides[d];
      }
      layout.reduced *= shape[d];
    } else if (mergeKept) {
      layout.keptShape[layout.keptRank - 1] *= shape[d];
      layout.keptStrides[layout.keptRank - 1] = strides[d];
    } else {
      layout.keptShape[layout.keptRank] = shape[d];
      layout.keptStrides[layout.keptRank++] = strides[d];
    }
  }
  const std::string &op = args.instruction.op;
  // The parts kernels' codes: 0 sum, 1 mean, 2 max.
  ReductionFunction reduction = *rowOf(args).memberAs<ReductionFunction>();
  int kind = reduction == ReductionFunction::Sum    ? 0
             : reduction == ReductionFunction::Mean ? 1
                                                : 2;
  int64_t count = out.size();
  if (count == 0)
    return Status::success();
  cudaStream_t stream = context.stream;
  int64_t part = partLength(layout.reduced);
  int64_t parts = std::max<int64_t>((layout.reduced + part - 1) / part, 1);
  float *partials = nullptr;
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void **>(&partials),
                      count * parts * sizeof(float), stream),
      "allocating a reduction's partial sums");
  Status status = onFloat(out.desc().dtype, [&](auto type) {
    using T = decltype(type);
    LaunchGeometry threads = elementwiseGeometry(count * parts);
    reducePartsKernel<<<threads.blocks, threads.threads, 0, stream>>>(
        kind, layout, static_cast<const T *>(in.raw()), partials, count, part,
        parts);
    LaunchGeometry results = elementwiseGeometry(count);
    combinePartsKernel<<<results.blocks, results.threads, 0, stream>>>(
        kind, partials, static_cast<T *>(out.raw()), count, parts,
        layout.reduced);
    return Status::success();
  });
  (void)cudaFreeAsync(partials, stream);
  TRELLIS_RETURN_IF_ERROR(status);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
  return Status::success();
}

int kindCode(ReduceKind kind) {
  return kind == ReduceKind::Sum ? 0 : kind == ReduceKind::Max ? 1 : 2;
}

} // namespace

void registerReductionKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::Reduction, {runReduceDims});
}

Status launchReduceElements(DType dtype, ReduceKind kind, void *target,
                            const void *a, const void *b, int64_t count,
                            cudaStream_t stream) {
  if (count == 0)
    return Status::success();
  LaunchGeometry grid = elementwiseGeometry(count);
  int code = kindCode(kind);
  switch (dtype) {
  case DType::F32:
    reduceKernel<<<grid.blocks, grid.threads, 0, stream>>>(
        code, static_cast<float *>(target), static_cast<const float *>(a),
        static_cast<const float *>(b), count);
    break;
  case DType::BF16:
    reduceKernel<<<grid.blocks, grid.threads, 0, stream>>>(
        code, static_cast<__nv_bfloat16 *>(target),
        static_cast<const __nv_bfloat16 *>(a),
        static_cast<const __nv_bfloat16 *>(b), count);
    break;
  case DType::F16:
    reduceKernel<<<grid.blocks, grid.threads, 0, stream>>>(
        code, static_cast<__half *>(target), static_cast<const __half *>(a),
        static_cast<const __half *>(b), count);
    break;
  case DType::I32:
    reduceInt32Kernel<<<grid.blocks, grid.threads, 0, stream>>>(
        code, static_cast<int32_t *>(target), static_cast<const int32_t *>(a),
        static_cast<const int32_t *>(b), count);
    break;
  }
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching a reduction");
  return Status::success();
}

Status launchFirstNonFinite(const std::vector<const Tensor *> &tensors,
                            int32_t *flag, cudaStream_t stream) {
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor &tensor = *tensors[t];
    if (tensor.size() == 0)
      continue;
    LaunchGeometry grid = elementwiseGeometry(tensor.size());
    int32_t index = static_cast<int32_t>(t) + 1;
    switch (tensor.desc().dtype) {
    case DType::F32:
      nonFiniteKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const float *>(tensor.raw()), tensor.size(), index, flag);
      break;
    case DType::BF16:
      nonFiniteKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const __nv_bfloat16 *>(tensor.raw()), tensor.size(),
          index, flag);
      break;
    case DType::F16:
      nonFiniteKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const __half *>(tensor.raw()), tensor.size(), index,
          flag);
      break;
    case DType::I32:
      break; // integers are always finite
    }
  }
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching the finiteness test");
  return Status::success();
}

} // namespace trellis::runtime::cuda
