//===- ElementwiseKernels.cu - Pointwise ops on the GPU -------------------===//
//
// fill, the binary family with NumPy broadcasting (add, sub, mul, div,
// maximum, equal_mask), the unary functions and their gradients
// (unary_grad), scale, cast and accumulate, in f32, bf16 and f16: each
// element is read, widened to fp32, computed with the formulas the CPU
// kernels share
// (trellis/Common/UnaryFunctions.h), and rounded once to the result's dtype
// (to nearest even). Grid-stride loops (LaunchGeometry.h).
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "LaunchGeometry.h"

#include "trellis/Common/UnaryFunctions.h"
#include "trellis/Runtime/OpShapes.h"

#include "DeviceFloat.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>
#include <string>

namespace trellis::runtime::cuda {

namespace {

/// Ranks a broadcast kernel takes (plans use at most 5).
constexpr int kMaxRank = 8;

template <typename T> __device__ float load(const T *data, int64_t i) {
  return widen(data[i]);
}
template <typename T> __device__ void store(T *data, int64_t i, float value) {
  data[i] = narrow<T>(value);
}

#define TRELLIS_GRID_STRIDE(i, count)                                          \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;             \
       i < (count); i += int64_t(gridDim.x) * blockDim.x)


/// The result's shape and each operand's strides in it (0 along
/// broadcast dimensions), passed by value.
struct Broadcast {
  int rank = 0;
  int64_t shape[kMaxRank];
  int64_t strideA[kMaxRank], strideB[kMaxRank];
};

/// Index: the integer type of the index arithmetic (32 bits where the
/// result's elements allow: a division per dimension costs far less).
template <typename T, typename Index>
__global__ void binaryKernel(BinaryFunction op, Broadcast layout, const T *a,
                             const T *b, T *out, int64_t count) {
  TRELLIS_GRID_STRIDE(i, count) {
    Index rest = static_cast<Index>(i);
    int64_t offsetA = 0, offsetB = 0;
    for (int d = layout.rank - 1; d > 0; --d) {
      Index extent = static_cast<Index>(layout.shape[d]);
      Index index = rest % extent;
      rest /= extent;
      offsetA += int64_t(index) * layout.strideA[d];
      offsetB += int64_t(index) * layout.strideB[d];
    }
    // The outermost dimension's index is what is left.
    if (layout.rank > 0) {
      offsetA += int64_t(rest) * layout.strideA[0];
      offsetB += int64_t(rest) * layout.strideB[0];
    }
    store(out, i, applyBinary(op, load(a, offsetA), load(b, offsetB)));
  }
}

template <typename T>
__global__ void unaryKernel(UnaryFunction fn, const T *x, const T *gradient,
                            T *out, int64_t count) {
  TRELLIS_GRID_STRIDE(i, count) {
    float value = load(x, i);
    store(out, i,
          gradient ? unaryDerivative(fn, value) * load(gradient, i)
                   : applyUnary(fn, value));
  }
}

template <typename T>
__global__ void scaleKernel(const T *x, float factor, T *out, int64_t count) {
  TRELLIS_GRID_STRIDE(i, count) { store(out, i, load(x, i) * factor); }
}

template <typename T>
__global__ void fillKernel(T *out, float value, int64_t count) {
  TRELLIS_GRID_STRIDE(i, count) { store(out, i, value); }
}

/// A constant's values (FillParameters::values, at most
/// kMaxConstantValues), passed by value.
struct ConstantValues {
  float values[kMaxConstantValues];
};

__global__ void constantKernel(float *out, ConstantValues values,
                               int64_t count) {
  TRELLIS_GRID_STRIDE(i, count) { out[i] = values.values[i]; }
}

template <typename T>
__global__ void accumulateKernel(const T *value, T *total, bool first,
                                 int64_t count) {
  TRELLIS_GRID_STRIDE(i, count) {
    store(total, i, first ? load(value, i) : load(total, i) + load(value, i));
  }
}

template <typename From, typename To>
__global__ void castKernel(const From *in, To *out, int64_t count) {
  TRELLIS_GRID_STRIDE(i, count) { store(out, i, load(in, i)); }
}

Status launched(const std::string &op) {
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
  return Status::success();
}

/// NumPy broadcasting of `a` and `b` to `result` (right-aligned).
StatusOr<Broadcast> broadcastLayout(const std::vector<int64_t> &a,
                                    const std::vector<int64_t> &b,
                                    const std::vector<int64_t> &result) {
  Broadcast layout;
  if (result.size() > static_cast<size_t>(kMaxRank))
    return Status::error("cuda: broadcasts of rank " +
                         std::to_string(result.size()) + " (more than " +
                         std::to_string(kMaxRank) + ") are not supported");
  std::vector<int64_t> strideA = broadcastStrides(a, result.size());
  std::vector<int64_t> strideB = broadcastStrides(b, result.size());
  // A dimension that continues the one before it in both operands (its
  // stride times its extent is the outer one's stride: contiguous, or
  // broadcast in both) merges into it: a same-shape sum is one dimension.
  for (size_t d = 0; d < result.size(); ++d) {
    int r = layout.rank;
    if (r > 0 && strideA[d] * result[d] == layout.strideA[r - 1] &&
        strideB[d] * result[d] == layout.strideB[r - 1]) {
      layout.shape[r - 1] *= result[d];
      layout.strideA[r - 1] = strideA[d];
      layout.strideB[r - 1] = strideB[d];
      continue;
    }
    layout.shape[r] = result[d];
    layout.strideA[r] = strideA[d];
    layout.strideB[r] = strideB[d];
    ++layout.rank;
  }
  return layout;
}

Status runElementwise(const KernelArgs &args, CudaContext &context) {
  const Instruction &instruction = args.instruction;
  const std::string &op = instruction.op;
  // Each family below reads its member from the row.
  const OpContract &row = rowOf(args);
  Tensor &out = args.out(0);
  int64_t count = out.size();
  LaunchGeometry grid = elementwiseGeometry(count);
  cudaStream_t stream = context.stream;
  DType dtype = out.desc().dtype;
  if (row.family == OpFamily::Fill &&
      !parametersOf<FillParameters>(args).values.empty()) {
    // A constant's values ride in the launch's parameters (captured by
    // value in a recorded step).
    ConstantValues values{};
    const std::vector<double> &given =
        parametersOf<FillParameters>(args).values;
    for (size_t i = 0; i < given.size(); ++i)
      values.values[i] = static_cast<float>(given[i]);
    constantKernel<<<grid.blocks, grid.threads, 0, stream>>>(
        static_cast<float *>(out.raw()), values, count);
    return launched(op);
  }
  if (row.family == OpFamily::Fill) {
    float value = static_cast<float>(parametersOf<FillParameters>(args).value);
    TRELLIS_RETURN_IF_ERROR(onFloat(dtype, [&](auto type) {
      using T = decltype(type);
      fillKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<T *>(out.raw()), value, count);
      return Status::success();
    }));
    return launched(op);
  }
  const Tensor &x = args.in(0);
  if (row.family != OpFamily::Cast && x.desc().dtype != dtype)
    return Status::error("cuda: " + op + " of " + dtypeName(x.desc().dtype) +
                         " into " + dtypeName(dtype) +
                         " (expected operands of the result's dtype)");
  if (row.family == OpFamily::Cast) {
    TRELLIS_RETURN_IF_ERROR(onFloat(x.desc().dtype, [&](auto from) {
      using From = decltype(from);
      return onFloat(dtype, [&](auto to) {
        using To = decltype(to);
        castKernel<<<grid.blocks, grid.threads, 0, stream>>>(
            static_cast<const From *>(x.raw()), static_cast<To *>(out.raw()),
            count);
        return Status::success();
      });
    }));
    return launched(op);
  }
  if (row.family == OpFamily::Accumulate) {
    bool first = parametersOf<AccumulateParameters>(args).first;
    TRELLIS_RETURN_IF_ERROR(onFloat(dtype, [&](auto type) {
      using T = decltype(type);
      accumulateKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const T *>(x.raw()), static_cast<T *>(out.raw()), first,
          count);
      return Status::success();
    }));
    return launched(op);
  }
  if (row.family == OpFamily::Scale) {
    float factor =
        static_cast<float>(parametersOf<ScaleParameters>(args).factor);
    TRELLIS_RETURN_IF_ERROR(onFloat(dtype, [&](auto type) {
      using T = decltype(type);
      scaleKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const T *>(x.raw()), factor, static_cast<T *>(out.raw()),
          count);
      return Status::success();
    }));
    return launched(op);
  }
  if (std::optional<BinaryFunction> fn = row.binaryFunction()) {
    const Tensor &y = args.in(1);
    if (y.desc().dtype != dtype)
      return Status::error("cuda: " + op + " of " + dtypeName(y.desc().dtype) +
                           " into " + dtypeName(dtype) +
                           " (expected operands of the result's dtype)");
    StatusOr<Broadcast> layout =
        broadcastLayout(x.shape(), y.shape(), out.shape());
    if (!layout.ok())
      return layout.status();
    TRELLIS_RETURN_IF_ERROR(onFloat(dtype, [&](auto type) {
      using T = decltype(type);
      if (count <= INT32_MAX)
        binaryKernel<T, uint32_t><<<grid.blocks, grid.threads, 0, stream>>>(
            *fn, *layout, static_cast<const T *>(x.raw()),
            static_cast<const T *>(y.raw()), static_cast<T *>(out.raw()),
            count);
      else
        binaryKernel<T, uint64_t><<<grid.blocks, grid.threads, 0, stream>>>(
            *fn, *layout, static_cast<const T *>(x.raw()),
            static_cast<const T *>(y.raw()), static_cast<T *>(out.raw()),
            count);
      return Status::success();
    }));
    return launched(op);
  }
  bool gradient = row.family == OpFamily::UnaryGrad;
  UnaryFunction fn = gradient
                         ? parametersOf<UnaryGradParameters>(args).function
                         : row.unaryFunction().value_or(UnaryFunction::Neg);
  TRELLIS_RETURN_IF_ERROR(onFloat(dtype, [&](auto type) {
    using T = decltype(type);
    unaryKernel<<<grid.blocks, grid.threads, 0, stream>>>(
        fn, static_cast<const T *>(x.raw()),
        gradient ? static_cast<const T *>(args.in(1).raw()) : nullptr,
        static_cast<T *>(out.raw()), count);
    return Status::success();
  }));
  return launched(op);
}

} // namespace

void registerElementwiseKernels(CudaKernelTable &table) {
  for (OpFamily family :
       {OpFamily::Fill, OpFamily::Binary, OpFamily::Unary, OpFamily::UnaryGrad,
        OpFamily::Scale, OpFamily::Cast, OpFamily::Accumulate})
    table.addFamily(family, {runElementwise});
}

} // namespace trellis::runtime::cuda
