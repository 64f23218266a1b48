//===- RowKernels.cu - Softmax and norms over rows ------------------------===//
//
// softmax, softmax_grad, layer_norm, rms_norm and their gradients over the
// last dimension, with the CPU kernels' arithmetic
// (runtime/cpu/Normalization.cpp): row statistics summed in double, each
// result rounded once. One block works on a row at a time (LaunchGeometry's
// rowGeometry); its sums reduce over the block in a fixed tree, so every
// run gives the same bits. A norm's weight and bias gradients are sums over
// rows: from row statistics the first kernel kept, a thread per feature
// and part of rows (a length the shape fixes) adds its rows in order, then
// a thread per feature adds its parts in order.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "LaunchGeometry.h"

#include "BlockReduce.cuh"
#include "DeviceFloat.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

namespace trellis::runtime::cuda {

namespace {

#define TRELLIS_ROWS(r, rows)                                                  \
  for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)
#define TRELLIS_COLUMNS(c, n)                                                  \
  for (int64_t c = threadIdx.x; c < (n); c += blockDim.x)

template <typename T>
__global__ void softmaxKernel(const T *x, T *y, int64_t rows, int64_t n) {
  __shared__ double sums[32];
  __shared__ float maxima[32];
  TRELLIS_ROWS(r, rows) {
    const T *row = x + r * n;
    float max = -INFINITY;
    TRELLIS_COLUMNS(c, n) max = fmaxf(max, widen(row[c]));
    max = blockMax(max, maxima);
    double sum = 0;
    TRELLIS_COLUMNS(c, n) sum += expf(widen(row[c]) - max);
    sum = blockSum(sum, sums);
    float inverse = static_cast<float>(1.0 / sum);
    TRELLIS_COLUMNS(c, n)
    y[r * n + c] = narrow<T>(expf(widen(row[c]) - max) * inverse);
  }
}

template <typename T>
__global__ void softmaxGradKernel(const T *y, const T *dy, T *dx, int64_t rows,
                                  int64_t n) {
  __shared__ double sums[32];
  TRELLIS_ROWS(r, rows) {
    double dot = 0;
    TRELLIS_COLUMNS(c, n)
    dot += double(widen(y[r * n + c])) * widen(dy[r * n + c]);
    float total = static_cast<float>(blockSum(dot, sums));
    TRELLIS_COLUMNS(c, n) {
      float value = widen(y[r * n + c]);
      dx[r * n + c] = narrow<T>(value * (widen(dy[r * n + c]) - total));
    }
  }
}

/// A row's mean and reciprocal standard deviation (layer norms), or 0 and
/// its reciprocal root mean square (RMS norms), summed in double.
template <typename T>
__device__ void rowMoments(const T *row, int64_t n, bool rms, double epsilon,
                           double *sums, double &mean, double &rstd) {
  mean = 0;
  if (!rms) {
    double sum = 0;
    TRELLIS_COLUMNS(c, n) sum += widen(row[c]);
    mean = blockSum(sum, sums) / n;
  }
  double squares = 0;
  TRELLIS_COLUMNS(c, n) {
    double centered = double(widen(row[c])) - mean;
    squares += centered * centered;
  }
  rstd = 1.0 / sqrt(blockSum(squares, sums) / n + epsilon);
}

/// layer_norm (bias) or rms_norm (no bias) of each row.
template <typename T, typename W>
__global__ void normKernel(const T *x, const W *weight, const W *bias, T *y,
                           int64_t rows, int64_t n, double epsilon) {
  __shared__ double sums[32];
  bool rms = bias == nullptr;
  TRELLIS_ROWS(r, rows) {
    const T *row = x + r * n;
    double mean, rstd;
    rowMoments(row, n, rms, epsilon, sums, mean, rstd);
    TRELLIS_COLUMNS(c, n) {
      float normalized =
          static_cast<float>((double(widen(row[c])) - mean) * rstd);
      float value = normalized * widen(weight[c]);
      if (!rms)
        value += widen(bias[c]);
      y[r * n + c] = narrow<T>(value);
    }
  }
}

/// dx of each row, and the row's (mean, rstd) into `statistics`.
template <typename T, typename W>
__global__ void normGradKernel(const T *x, const W *weight, const T *dy, T *dx,
                               double2 *statistics, bool rms, int64_t rows,
                               int64_t n, double epsilon) {
  __shared__ double sums[32];
  TRELLIS_ROWS(r, rows) {
    const T *row = x + r * n;
    const T *gradient = dy + r * n;
    double mean, rstd;
    rowMoments(row, n, rms, epsilon, sums, mean, rstd);
    // layer norm: mean of g and of g * xhat; rms norm: the dot of g and x.
    double first = 0, second = 0;
    TRELLIS_COLUMNS(c, n) {
      double g = double(widen(gradient[c])) * widen(weight[c]);
      double value = widen(row[c]);
      if (rms) {
        second += g * value;
      } else {
        first += g;
        second += g * (value - mean) * rstd;
      }
    }
    first = blockSum(first, sums) / n;
    second = blockSum(second, sums);
    TRELLIS_COLUMNS(c, n) {
      double g = double(widen(gradient[c])) * widen(weight[c]);
      double value = widen(row[c]);
      double result =
          rms ? rstd * (g - value * (rstd * rstd * second / n))
              : rstd * (g - first - (value - mean) * rstd * (second / n));
      dx[r * n + c] = narrow<T>(static_cast<float>(result));
    }
    if (threadIdx.x == 0)
      statistics[r] = make_double2(mean, rstd);
  }
}

/// Weight (and bias) gradients, first pass: per feature and part of
/// `part` rows, the rows' terms in row order, into partials[p * n + c]
/// (weights) and partials[(parts + p) * n + c] (biases).
template <typename T>
__global__ void
normParameterPartsKernel(const T *x, const T *dy, const double2 *statistics,
                         double *partials, int64_t rows, int64_t n,
                         int64_t part, int64_t parts) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       t < n * parts; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = t % n, p = t / n;
    double weightSum = 0, biasSum = 0;
    for (int64_t r = p * part; r < min(rows, (p + 1) * part); ++r) {
      double g = widen(dy[r * n + c]);
      double xhat =
          (double(widen(x[r * n + c])) - statistics[r].x) * statistics[r].y;
      weightSum += g * xhat;
      biasSum += g;
    }
    partials[t] = weightSum;
    partials[parts * n + t] = biasSum;
  }
}

/// Second pass: per feature, its parts in order.
template <typename W>
__global__ void normParameterGradKernel(const double *partials, W *dweight,
                                        W *dbias, int64_t n, int64_t parts) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n;
       c += int64_t(gridDim.x) * blockDim.x) {
    double weightSum = 0, biasSum = 0;
    for (int64_t p = 0; p < parts; ++p) {
      weightSum += partials[p * n + c];
      biasSum += partials[(parts + p) * n + c];
    }
    dweight[c] = narrow<W>(static_cast<float>(weightSum));
    if (dbias)
      dbias[c] = narrow<W>(static_cast<float>(biasSum));
  }
}

/// Rows per part of the parameters' gradient sums: the power of two
/// nearest above the square root of the rows, at least 32 (the order
/// depends on the shape alone).
int64_t rowPart(int64_t rows) {
  int64_t part = 32;
  while (part * part < rows)
    part *= 2;
  return part;
}

/// Calls `body(T(), W())` with the C++ types of `activations` and
/// `weights` (float dtypes; W is float or T).
template <typename Body>
Status onTypes(DType activations, DType weights, Body body) {
  auto withWeights = [&](auto t) -> Status {
    using T = decltype(t);
    if (weights == DType::F32)
      return body(t, float());
    if (weights == activations)
      return body(t, t);
    return Status::error(std::string("cuda: norm weights of ") +
                         dtypeName(weights) + " for activations of " +
                         dtypeName(activations) +
                         " (expected f32 or the activations' dtype)");
  };
  switch (activations) {
  case DType::BF16:
    return withWeights(__nv_bfloat16());
  case DType::F16:
    return withWeights(__half());
  default:
    return withWeights(float());
  }
}

Status runRows(const KernelArgs &args, CudaContext &context) {
  const std::string &op = args.instruction.op;
  const Tensor &x = args.in(0);
  int64_t n = x.shape().empty() ? 1 : x.shape().back();
  int64_t rows = n ? x.size() / n : 0;
  if (rows == 0)
    return Status::success();
  cudaStream_t stream = context.stream;
  LaunchGeometry grid = rowGeometry(rows, rowThreads(n));
  const OpContract &row = rowOf(args);
  if (row.family == OpFamily::Rowwise) {
    TRELLIS_RETURN_IF_ERROR(
        onTypes(x.desc().dtype, x.desc().dtype, [&](auto t, auto) -> Status {
          using T = decltype(t);
          if (!row.gradient)
            softmaxKernel<<<grid.blocks, grid.threads, 0, stream>>>(
                static_cast<const T *>(x.raw()),
                static_cast<T *>(args.out(0).raw()), rows, n);
          else
            softmaxGradKernel<<<grid.blocks, grid.threads, 0, stream>>>(
                static_cast<const T *>(x.raw()),
                static_cast<const T *>(args.in(1).raw()),
                static_cast<T *>(args.out(0).raw()), rows, n);
          return Status::success();
        }));
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
    return Status::success();
  }
  double epsilon = parametersOf<NormParameters>(args).epsilon;
  // Layer norm centers the rows and adds a bias; RMS norm does neither.
  // Every kind is named: a new one fails to compile until it has a case.
  bool layer = false;
  switch (*row.memberAs<NormKind>()) {
  case NormKind::Layer:
    layer = true;
    break;
  case NormKind::Rms:
    layer = false;
    break;
  }
  const Tensor &weight = args.in(1);
  if (!row.gradient) {
    TRELLIS_RETURN_IF_ERROR(onTypes(
        x.desc().dtype, weight.desc().dtype, [&](auto t, auto w) -> Status {
          using T = decltype(t);
          using W = decltype(w);
          normKernel<<<grid.blocks, grid.threads, 0, stream>>>(
              static_cast<const T *>(x.raw()),
              static_cast<const W *>(weight.raw()),
              layer ? static_cast<const W *>(args.in(2).raw()) : nullptr,
              static_cast<T *>(args.out(0).raw()), rows, n, epsilon);
          return Status::success();
        }));
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
    return Status::success();
  }
  // The gradients: dx per row, then the parameters' gradients per feature
  // (parts of rows, then the parts in order).
  int64_t part = rowPart(rows), parts = (rows + part - 1) / part;
  char *scratch = nullptr;
  int64_t statisticsBytes = rows * sizeof(double2);
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void **>(&scratch),
                      statisticsBytes + 2 * parts * n * sizeof(double), stream),
      "allocating a norm gradient's row statistics");
  auto *statistics = reinterpret_cast<double2 *>(scratch);
  auto *partials = reinterpret_cast<double *>(scratch + statisticsBytes);
  Status status = onTypes(
      x.desc().dtype, weight.desc().dtype, [&](auto t, auto w) -> Status {
        using T = decltype(t);
        using W = decltype(w);
        const T *dy = static_cast<const T *>(args.in(2).raw());
        normGradKernel<<<grid.blocks, grid.threads, 0, stream>>>(
            static_cast<const T *>(x.raw()),
            static_cast<const W *>(weight.raw()), dy,
            static_cast<T *>(args.out(0).raw()), statistics, !layer, rows, n,
            epsilon);
        LaunchGeometry pieces = elementwiseGeometry(n * parts);
        normParameterPartsKernel<<<pieces.blocks, pieces.threads, 0, stream>>>(
            static_cast<const T *>(x.raw()), dy, statistics, partials, rows, n,
            part, parts);
        LaunchGeometry features = elementwiseGeometry(n);
        normParameterGradKernel<<<features.blocks, features.threads, 0,
                                  stream>>>(
            partials, static_cast<W *>(args.out(1).raw()),
            layer ? static_cast<W *>(args.out(2).raw()) : nullptr, n, parts);
        return Status::success();
      });
  (void)cudaFreeAsync(scratch, stream);
  TRELLIS_RETURN_IF_ERROR(status);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
  return Status::success();
}

} // namespace

void registerRowKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::Rowwise, {runRows});
  table.addFamily(OpFamily::Norm, {runRows});
}

} // namespace trellis::runtime::cuda
