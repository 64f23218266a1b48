//===- EmbeddingKernels.cu - Embedding, its gradient, rope, positions -----===//
//
// As the CPU's (runtime/cpu/Embedding.cpp, Attention.cpp): a vocabulary
// shard holds the rows at its rank's place (other ids give zero rows); the
// gradient adds each token's row into the table in token order, one thread
// per column, so every element's sum has one order (deterministic, no
// atomics); rotary embeddings and position ids read each stored index's
// place in the sequence (zigzag chunks included,
// trellis/Common/SequenceChunks.h, compiled for host and device).
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "DeviceFloat.cuh"
#include "LaunchGeometry.h"

#include "trellis/Common/SequenceChunks.h"

#include <string>
#include <vector>

namespace trellis::runtime::cuda {

namespace {

template <typename T>
__global__ void embeddingKernel(const T *table, const int32_t *ids, T *out,
                                int64_t rows, int64_t width, int64_t offset,
                                int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t token = i / width, column = i % width;
    int64_t row = static_cast<int64_t>(ids[token]) - offset;
    out[i] =
        row >= 0 && row < rows ? table[row * width + column] : narrow<T>(0.0f);
  }
}

/// One thread per column of the table: the tokens' rows in token order.
template <typename T>
__global__ void embeddingGradKernel(const int32_t *ids, const T *grad,
                                    float *table, int64_t tokens, int64_t rows,
                                    int64_t width, int64_t offset,
                                    int64_t padding) {
  for (int64_t column = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       column < width; column += int64_t(gridDim.x) * blockDim.x)
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t id = ids[t];
      int64_t row = id - offset;
      if (row < 0 || row >= rows || id == padding)
        continue;
      table[row * width + column] += widen(grad[t * width + column]);
    }
}

template <typename T>
__global__ void ropeKernel(const T *in, T *out, const double *frequencies,
                           int64_t batch, int64_t seq, int64_t heads,
                           int64_t dim, int64_t first, int64_t length,
                           int64_t chunks, double sign) {
  int64_t half = dim / 2;
  int64_t count = batch * seq * heads * half;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = k % half, rest = k / half;
    int64_t s = (rest / heads) % seq;
    int64_t base = rest * dim;
    double angle = sign * double(sequencePosition(first + s, length, chunks)) *
                   frequencies[i];
    float cosine = static_cast<float>(cos(angle));
    float sine = static_cast<float>(sin(angle));
    float x1 = widen(in[base + i]), x2 = widen(in[base + i + half]);
    out[base + i] = narrow<T>(x1 * cosine - x2 * sine);
    out[base + i + half] = narrow<T>(x2 * cosine + x1 * sine);
  }
}

__global__ void positionsKernel(int32_t *out, int64_t count, int64_t first,
                                int64_t length, int64_t chunks) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = static_cast<int32_t>(sequencePosition(first + i, length, chunks));
}

Status runEmbedding(const KernelArgs &args, CudaContext &context) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  cudaStream_t stream = context.stream;
  const std::string &op = args.instruction.op;
  if (op == "embedding") {
    const Tensor &table = args.in(0), &ids = args.in(1);
    int64_t rows = table.shape()[0], width = table.shape()[1];
    int64_t offset =
        args.instruction.integer("vocab_offset") + *position * rows;
    int64_t count = ids.size() * width;
    if (count == 0)
      return Status::success();
    LaunchGeometry grid = elementwiseGeometry(count);
    TRELLIS_RETURN_IF_ERROR(onFloat(table.desc().dtype, [&](auto type) {
      using T = decltype(type);
      embeddingKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const T *>(table.raw()),
          static_cast<const int32_t *>(ids.raw()),
          static_cast<T *>(args.out(0).raw()), rows, width, offset, count);
      return Status::success();
    }));
  } else {
    const Tensor &ids = args.in(0), &grad = args.in(1);
    Tensor &out = args.out(0);
    int64_t rows = out.shape()[0], width = out.shape()[1];
    int64_t offset =
        args.instruction.integer("vocab_offset") + *position * rows;
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(out.raw(), 0, out.bytes(), stream),
        "zeroing an embedding gradient");
    if (out.desc().dtype != DType::F32)
      return Status::error(std::string("cuda: embedding_grad into ") +
                           dtypeName(out.desc().dtype) +
                           " (expected an f32 table gradient)");
    LaunchGeometry grid = elementwiseGeometry(width);
    TRELLIS_RETURN_IF_ERROR(onFloat(grad.desc().dtype, [&](auto type) {
      using T = decltype(type);
      embeddingGradKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const int32_t *>(ids.raw()),
          static_cast<const T *>(grad.raw()), static_cast<float *>(out.raw()),
          ids.size(), rows, width, offset,
          args.instruction.integer("padding_idx", -1));
      return Status::success();
    }));
  }
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
  return Status::success();
}

/// The rotary frequencies, copied to the device when the plan loads.
class PreparedRope : public PreparedLaunch {
public:
  ~PreparedRope() override { cudaFree(frequencies); }
  double *frequencies = nullptr;
};

StatusOr<std::unique_ptr<PreparedLaunch>> prepareRope(const KernelArgs &args,
                                                      CudaContext &) {
  const std::vector<double> &frequencies =
      args.instruction.reals("frequencies");
  auto prepared = std::make_unique<PreparedRope>();
  int64_t bytes = std::max<size_t>(frequencies.size(), 1) * sizeof(double);
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void **>(&prepared->frequencies), bytes),
      "allocating rotary frequencies");
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(prepared->frequencies, frequencies.data(),
                 frequencies.size() * sizeof(double), cudaMemcpyHostToDevice),
      "copying rotary frequencies");
  return std::unique_ptr<PreparedLaunch>(std::move(prepared));
}

Status runRope(const KernelArgs &args, CudaContext &context) {
  std::unique_ptr<PreparedLaunch> planned;
  const auto *prepared = dynamic_cast<const PreparedRope *>(args.prepared);
  if (!prepared) {
    StatusOr<std::unique_ptr<PreparedLaunch>> made = prepareRope(args, context);
    if (!made.ok())
      return made.status();
    planned = std::move(*made);
    prepared = static_cast<const PreparedRope *>(planned.get());
  }
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  const Tensor &in = args.in(0);
  const std::vector<int64_t> &shape = in.shape();
  int64_t batch = shape[0], seq = shape[1], heads = shape[2], dim = shape[3];
  int64_t count = batch * seq * heads * (dim / 2);
  if (count > 0) {
    LaunchGeometry grid = elementwiseGeometry(count);
    double sign = args.instruction.flag("inverse") ? -1.0 : 1.0;
    TRELLIS_RETURN_IF_ERROR(onFloat(in.desc().dtype, [&](auto type) {
      using T = decltype(type);
      ropeKernel<<<grid.blocks, grid.threads, 0, context.stream>>>(
          static_cast<const T *>(in.raw()), static_cast<T *>(args.out(0).raw()),
          prepared->frequencies, batch, seq, heads, dim, *position * seq,
          seq * shardCount(args), args.instruction.integer("chunks"), sign);
      return Status::success();
    }));
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching rope");
  }
  // Without a prepared launch the frequencies go when the kernel is done.
  if (planned)
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context.stream),
                                 "waiting for rope");
  return Status::success();
}

Status runPositions(const KernelArgs &args, CudaContext &context) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  Tensor &out = args.out(0);
  int64_t count = out.size();
  if (count == 0)
    return Status::success();
  LaunchGeometry grid = elementwiseGeometry(count);
  positionsKernel<<<grid.blocks, grid.threads, 0, context.stream>>>(
      static_cast<int32_t *>(out.raw()), count, *position * count,
      count * shardCount(args), args.instruction.integer("chunks"));
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching positions");
  return Status::success();
}

} // namespace

void registerEmbeddingKernels(CudaKernelTable &table) {
  table.add({"embedding", "embedding_grad"}, runEmbedding);
  table.add({"rope"}, runRope, prepareRope);
  table.add({"positions"}, runPositions);
}

} // namespace trellis::runtime::cuda
