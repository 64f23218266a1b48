//===- CrossEntropyKernels.cu - Cross-entropy and its gradient ------------===//
//
// As the CPU's (runtime/cpu/CrossEntropy.cpp): per row the maximum, the
// sum of exponentials (double) and the target's logit, the probabilities
// never stored; the loss adds the rows' terms in a fixed order (one block,
// each thread's rows in order, then a fixed tree), and the gradient is
// exp(x - logsumexp) times the upstream factor, less it at the target. With
// the classes split over mesh axes, the rows' maxima, sums and picked
// logits combine across the group on the communication stream (the
// maximum first, the sums rescaled to it and carried as float pairs), as
// the CPU does.
//
//===----------------------------------------------------------------------===//

#include "BlockReduce.cuh"
#include "CudaSupport.h"
#include "DeviceFloat.cuh"
#include "LaunchGeometry.h"

#include <string>

namespace trellis::runtime::cuda {

namespace {

/// Per row: the maximum, the sum of exp(x - max), and the target's logit
/// where this rank holds its class (0 elsewhere).
template <typename T>
__global__ void rowStatsKernel(const T *logits, const int32_t *targets,
                               float *maxima, double *sums, float *picked,
                               int64_t rows, int64_t classes, int64_t offset) {
  __shared__ double doubles[32];
  __shared__ float floats[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *row = logits + r * classes;
    float max = -INFINITY;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      max = fmaxf(max, widen(row[c]));
    max = blockMax(max, floats);
    double sum = 0;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      sum += exp(double(widen(row[c])) - double(max));
    sum = blockSum(sum, doubles);
    if (threadIdx.x == 0) {
      int64_t target = targets[r] - offset;
      maxima[r] = max;
      sums[r] = sum;
      picked[r] = target >= 0 && target < classes ? widen(row[target]) : 0.0f;
    }
  }
}

/// Split classes: each rank's sum rescaled to the group's maximum, as a
/// float pair (high part, remainder).
__global__ void rescaleKernel(const float *maxima, const float *global,
                              const double *sums, float *pairs, int64_t rows) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    double sum = sums[r] * exp(double(maxima[r]) - double(global[r]));
    pairs[r] = static_cast<float>(sum);
    pairs[rows + r] = static_cast<float>(sum - double(pairs[r]));
  }
}

__global__ void combineKernel(const float *pairs, const float *global,
                              double *sums, float *maxima, int64_t rows) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    sums[r] = double(pairs[r]) + double(pairs[rows + r]);
    maxima[r] = global[r];
  }
}

/// One block: the rows' terms in a fixed order, times `scale`.
__global__ void lossKernel(const float *maxima, const double *sums,
                           const float *picked, float *loss, int64_t rows,
                           double scale) {
  __shared__ double doubles[32];
  double total = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    total += double(maxima[r]) + log(sums[r]) - double(picked[r]);
  total = blockSum(total, doubles);
  if (threadIdx.x == 0)
    *loss = static_cast<float>(total * scale);
}

template <typename T>
__global__ void gradKernel(const T *logits, const int32_t *targets,
                           const float *maxima, const double *sums,
                           const float *upstream, T *dx, int64_t rows,
                           int64_t classes, int64_t offset, double scale) {
  double factor = double(*upstream) * scale;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double logSumExp = double(maxima[r]) + log(sums[r]);
    int64_t target = targets[r] - offset;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      float value = static_cast<float>(
          exp(double(widen(logits[r * classes + c])) - logSumExp) * factor);
      if (c == target)
        value -= static_cast<float>(factor);
      dx[r * classes + c] = narrow<T>(value);
    }
  }
}

Status launched(const std::string &what) {
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + what);
  return Status::success();
}

Status runCrossEntropy(const KernelArgs &args, CudaContext &context) {
  const Tensor &logits = args.in(0), &targets = args.in(1);
  int64_t classes = logits.shape().back();
  int64_t rows = targets.size();
  int64_t normalizer = parametersOf<LossParameters>(args).normalizer;
  double scale = 1.0 / static_cast<double>(normalizer ? normalizer : rows);
  bool isGrad = rowOf(args).gradient;
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  bool split = !args.axes.empty();
  int64_t offset = *position * classes;
  cudaStream_t stream = context.stream;
  // Scratch: maxima, picked, the group's maxima, pairs (float) and sums
  // (double), from the stream-ordered allocator.
  int64_t floatBytes = 5 * rows * sizeof(float);
  int64_t bytes = floatBytes + rows * sizeof(double);
  char *scratch = nullptr;
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void **>(&scratch),
                      std::max<int64_t>(bytes, 1), stream),
      "allocating cross-entropy's row statistics");
  float *maxima = reinterpret_cast<float *>(scratch);
  float *picked = maxima + rows, *global = picked + rows;
  float *pairs = global + rows;
  double *sums = reinterpret_cast<double *>(scratch + floatBytes);
  auto body = [&]() -> Status {
    if (rows == 0)
      return Status::success();
    LaunchGeometry perRow = rowGeometry(rows, rowThreads(classes));
    TRELLIS_RETURN_IF_ERROR(onFloat(logits.desc().dtype, [&](auto type) {
      using T = decltype(type);
      rowStatsKernel<<<perRow.blocks, perRow.threads, 0, stream>>>(
          static_cast<const T *>(logits.raw()),
          static_cast<const int32_t *>(targets.raw()), maxima, sums, picked,
          rows, classes, offset);
      return launched("cross-entropy's row statistics");
    }));
    if (split) {
      if (!args.comm || !context.exchange)
        return Status::error("cuda: a split cross-entropy needs a "
                             "communicator");
      LaunchGeometry perElement = elementwiseGeometry(rows);
      TRELLIS_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(global, maxima, rows * sizeof(float),
                          cudaMemcpyDeviceToDevice, stream),
          "copying row maxima");
      TRELLIS_RETURN_IF_ERROR(context.exchange([&] {
        return args.comm->allReduce(args.axes, global, rows, DType::F32,
                                    ReduceKind::Max);
      }));
      rescaleKernel<<<perElement.blocks, perElement.threads, 0, stream>>>(
          maxima, global, sums, pairs, rows);
      TRELLIS_RETURN_IF_ERROR(launched("cross-entropy's rescaling"));
      TRELLIS_RETURN_IF_ERROR(context.exchange([&] {
        Status summed = args.comm->allReduce(args.axes, pairs, 2 * rows,
                                             DType::F32, ReduceKind::Sum);
        if (!summed.ok())
          return summed;
        return args.comm->allReduce(args.axes, picked, rows, DType::F32,
                                    ReduceKind::Sum);
      }));
      combineKernel<<<perElement.blocks, perElement.threads, 0, stream>>>(
          pairs, global, sums, maxima, rows);
      TRELLIS_RETURN_IF_ERROR(launched("cross-entropy's combination"));
    }
    if (!isGrad) {
      lossKernel<<<1, 1024, 0, stream>>>(
          maxima, sums, picked, static_cast<float *>(args.out(0).raw()), rows,
          scale);
      return launched("cross-entropy's loss");
    }
    LaunchGeometry perRow2 = rowGeometry(rows, rowThreads(classes));
    return onFloat(logits.desc().dtype, [&](auto type) {
      using T = decltype(type);
      gradKernel<<<perRow2.blocks, perRow2.threads, 0, stream>>>(
          static_cast<const T *>(logits.raw()),
          static_cast<const int32_t *>(targets.raw()), maxima, sums,
          static_cast<const float *>(args.in(2).raw()),
          static_cast<T *>(args.out(0).raw()), rows, classes, offset, scale);
      return launched("cross-entropy's gradient");
    });
  };
  Status status = body();
  cudaFreeAsync(scratch, stream);
  return status;
}

} // namespace

void registerCrossEntropyKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::Loss, {runCrossEntropy});
}

} // namespace trellis::runtime::cuda
