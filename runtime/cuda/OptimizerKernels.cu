//===- OptimizerKernels.cu - AdamW and SGD as one multi-tensor launch -----===//
//
// A run of optimizer updates (Device::launchUpdates) is one kernel: each
// block takes chunks of the updates' elements in order (the CPU's chunks,
// runtime/cpu/Optimizers.cpp), with the CPU's arithmetic in double. The
// step count stays on the device: each update's block reads it, and
// computes the bias corrections and a scheduled rate
// (trellis/Common/LearningRate.h, the one definition both backends
// compile) there, so no value comes back to the host. An update's
// grad_scale is read there the same way.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"

#include "trellis/Common/LearningRate.h"

#include <string>
#include <vector>

namespace trellis::runtime::cuda {

namespace {

/// Elements per chunk: each element's update is independent, so the split
/// changes no result.
constexpr int64_t kChunk = int64_t(1) << 14;

/// One update's operands and constants, as the kernel reads them.
struct DeviceUpdate {
  const float *param, *grad, *m, *v;
  float *newParam, *newM, *newV;
  /// The step count (adamw), in device memory.
  const float *step;
  /// The grad_scale, in device memory, or null: the gradient is multiplied
  /// by its inverse, and one that is not finite leaves the operands'
  /// values in the results.
  const float *gradScale;
  int64_t n;
  bool sgd, scheduled;
  double lr, decay, beta1, beta2, epsilon;
  LrSchedule schedule;
};

/// (update, first element) of every chunk.
struct Chunk {
  int32_t update;
  int64_t first;
};

__global__ void optimizerKernel(const DeviceUpdate *updates,
                                const Chunk *chunks, int64_t count) {
  __shared__ double rate, correction1, correction2, unscale;
  __shared__ bool skipped;
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const DeviceUpdate &u = updates[chunks[c].update];
    __syncthreads();
    if (threadIdx.x == 0) {
      double scale = u.gradScale ? *u.gradScale : 1.0;
      skipped = !isfinite(scale);
      unscale = 1.0 / scale;
      rate = u.lr;
      correction1 = correction2 = 1;
      if (!u.sgd) {
        double step = *u.step;
        if (u.scheduled)
          rate = learningRateAt(u.schedule, static_cast<int64_t>(step));
        correction1 = 1.0 - pow(u.beta1, step);
        correction2 = 1.0 - pow(u.beta2, step);
      }
    }
    __syncthreads();
    int64_t first = chunks[c].first;
    int64_t last = min(u.n, first + kChunk);
    if (skipped) {
      // The operands' values, unless the results are their memory.
      for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
        if (u.newParam != u.param)
          u.newParam[i] = u.param[i];
        if (!u.sgd && u.newM != u.m)
          u.newM[i] = u.m[i];
        if (!u.sgd && u.newV != u.v)
          u.newV[i] = u.v[i];
      }
      continue;
    }
    for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
      float param = u.param[i];
      if (u.sgd) {
        u.newParam[i] = static_cast<float>(
            param - rate * (u.grad[i] * unscale + u.decay * param));
        continue;
      }
      double g = u.grad[i] * unscale;
      double mi = u.beta1 * u.m[i] + (1.0 - u.beta1) * g;
      double vi = u.beta2 * u.v[i] + (1.0 - u.beta2) * g * g;
      double update = (mi / correction1) / (sqrt(vi / correction2) + u.epsilon);
      u.newParam[i] =
          static_cast<float>(param - rate * (update + u.decay * param));
      u.newM[i] = static_cast<float>(mi);
      u.newV[i] = static_cast<float>(vi);
    }
  }
}

DeviceUpdate describe(const KernelArgs &args) {
  const OptimizerParameters &parameters =
      parametersOf<OptimizerParameters>(args);
  DeviceUpdate u{};
  u.sgd = rowOf(args).memberAs<OptimizerKind>() == OptimizerKind::Sgd;
  u.lr = parameters.learningRate;
  u.decay = parameters.weightDecay;
  u.param = static_cast<const float *>(args.in(0).raw());
  u.grad = static_cast<const float *>(args.in(1).raw());
  u.newParam = static_cast<float *>(args.out(0).raw());
  u.n = args.in(0).size();
  const OpContract &contract = rowOf(args);
  if (contract.hasGradientScale(args.instruction.inputs.size()))
    u.gradScale = static_cast<const float *>(
        args.in(contract.effects.gradientScaleOperand).raw());
  if (u.sgd)
    return u;
  u.m = static_cast<const float *>(args.in(2).raw());
  u.v = static_cast<const float *>(args.in(3).raw());
  u.step = static_cast<const float *>(args.in(4).raw());
  u.newM = static_cast<float *>(args.out(1).raw());
  u.newV = static_cast<float *>(args.out(2).raw());
  u.beta1 = parameters.beta1;
  u.beta2 = parameters.beta2;
  u.epsilon = parameters.epsilon;
  // (The plan loader checked the schedule against the op table's row.)
  if (parameters.schedule) {
    u.scheduled = true;
    u.schedule = *parameters.schedule;
  }
  return u;
}

/// What an update decides once: the table of the run of updates it starts
/// (the run is the same every step, over the same buffers), copied to the
/// device at its first launch; a recorded step (a CUDA graph) reads it
/// there, where a copy from host memory could not be recorded.
class PreparedUpdate : public PreparedLaunch {
public:
  ~PreparedUpdate() override {
    if (table)
      cudaFree(table);
  }
  mutable void *table = nullptr;
  mutable int64_t tableBytes = 0;
};

StatusOr<std::unique_ptr<PreparedLaunch>> prepareUpdate(const KernelArgs &,
                                                        CudaContext &) {
  return std::unique_ptr<PreparedLaunch>(std::make_unique<PreparedUpdate>());
}

} // namespace

Status launchOptimizers(const std::vector<KernelArgs> &updates,
                        CudaContext &context) {
  std::vector<DeviceUpdate> described;
  std::vector<Chunk> chunks;
  for (const KernelArgs &args : updates) {
    DeviceUpdate u = describe(args);
    for (int64_t first = 0; first < u.n; first += kChunk)
      chunks.push_back({static_cast<int32_t>(described.size()), first});
    described.push_back(u);
  }
  if (chunks.empty())
    return Status::success();
  cudaStream_t stream = context.stream;
  int64_t updateBytes = described.size() * sizeof(DeviceUpdate);
  int64_t chunkBytes = chunks.size() * sizeof(Chunk);
  int64_t bytes = updateBytes + chunkBytes;
  // The run's own table when its first update was prepared (made at the
  // first launch, the same run every step); else one for this launch.
  const auto *prepared =
      dynamic_cast<const PreparedUpdate *>(updates.front().prepared);
  char *table = nullptr;
  bool own = prepared && prepared->table && prepared->tableBytes == bytes;
  cudaError_t copied = cudaSuccess;
  if (own) {
    table = static_cast<char *>(prepared->table);
  } else if (prepared) {
    if (prepared->table)
      cudaFree(prepared->table);
    prepared->table = nullptr;
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaMalloc(&prepared->table, bytes),
                                 "allocating the optimizer's update table");
    prepared->tableBytes = bytes;
    table = static_cast<char *>(prepared->table);
    own = true;
    // Synchronous from pageable memory; the table is new, nothing reads it.
    copied = cudaMemcpy(table, described.data(), updateBytes,
                        cudaMemcpyHostToDevice);
    if (copied == cudaSuccess)
      copied = cudaMemcpy(table + updateBytes, chunks.data(), chunkBytes,
                          cudaMemcpyHostToDevice);
  } else {
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMallocAsync(reinterpret_cast<void **>(&table), bytes, stream),
        "allocating the optimizer's update table");
    // From pageable memory: the copies have taken the bytes when they
    // return.
    copied = cudaMemcpyAsync(table, described.data(), updateBytes,
                             cudaMemcpyHostToDevice, stream);
    if (copied == cudaSuccess)
      copied = cudaMemcpyAsync(table + updateBytes, chunks.data(), chunkBytes,
                               cudaMemcpyHostToDevice, stream);
  }
  if (copied == cudaSuccess) {
    int64_t count = static_cast<int64_t>(chunks.size());
    int blocks = static_cast<int>(std::min<int64_t>(count, 132 * 8));
    optimizerKernel<<<blocks, 256, 0, stream>>>(
        reinterpret_cast<const DeviceUpdate *>(table),
        reinterpret_cast<const Chunk *>(table + updateBytes), count);
    copied = cudaGetLastError();
  }
  if (!own)
    cudaFreeAsync(table, stream);
  TRELLIS_CUDA_RETURN_IF_ERROR(copied, "launching the optimizer updates");
  return Status::success();
}

Status runOptimizer(const KernelArgs &args, CudaContext &context) {
  return launchOptimizers({args}, context);
}

void registerOptimizerKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::Optimizer, {runOptimizer, prepareUpdate});
}

} // namespace trellis::runtime::cuda
