//===- EmbeddingKernels.cu - Embedding, its gradient, rope, positions -----===//
//
// As the CPU's (runtime/cpu/Embedding.cpp, Attention.cpp): a vocabulary
// shard holds the rows at its rank's place (other ids give zero rows); the
// gradient sorts the tokens by id (CUB's stable radix sort), then a thread
// per id and column adds that id's token rows in token order, so every
// element's sum has one order (deterministic, no atomics); rotary embeddings
// and position ids read each stored index's place in the sequence (zigzag
// chunks included, trellis/Common/SequenceChunks.h, compiled for host and
// device).
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "DeviceFloat.cuh"
#include "LaunchGeometry.h"
#include "RadixSort.cuh"

#include "trellis/Common/SequenceChunks.h"

#include <algorithm>
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

/// values[i] = i.
__global__ void iotaKernel(int32_t *values, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    values[i] = static_cast<int32_t>(i);
}

/// With the tokens sorted by id (stably: each id's tokens in token order),
/// a thread per (first token of an id, column) adds the id's token rows in
/// order and writes the table row's element once.
template <typename T, typename W>
__global__ void
embeddingGradKernel(const int32_t *sortedIds, const int32_t *sortedTokens,
                    const T *grad, W *table, int64_t tokens, int64_t rows,
                    int64_t width, int64_t offset, int64_t padding) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       t < tokens * width; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = t / width, column = t % width;
    int32_t id = sortedIds[p];
    if (p > 0 && sortedIds[p - 1] == id)
      continue;
    int64_t row = int64_t(id) - offset;
    if (row < 0 || row >= rows || id == padding)
      continue;
    float sum = 0;
    for (int64_t q = p; q < tokens && sortedIds[q] == id; ++q)
      sum += widen(grad[int64_t(sortedTokens[q]) * width + column]);
    table[row * width + column] = narrow<W>(sum);
  }
}

template <typename T>
__global__ void ropeKernel(const T *in, T *out, const double *frequencies,
                           int64_t batch, int64_t seq, int64_t heads,
                           int64_t dim, int64_t first, int64_t length,
                           int64_t chunks, double sign, bool interleaved) {
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
    // The pair: (2i, 2i + 1) interleaved, else (i, i + half).
    int64_t one = base + (interleaved ? 2 * i : i);
    int64_t two = base + (interleaved ? 2 * i + 1 : i + half);
    float x1 = widen(in[one]), x2 = widen(in[two]);
    out[one] = narrow<T>(x1 * cosine - x2 * sine);
    out[two] = narrow<T>(x2 * cosine + x1 * sine);
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
  if (!rowOf(args).gradient) {
    const Tensor &table = args.in(0), &ids = args.in(1);
    int64_t rows = table.shape()[0], width = table.shape()[1];
    int64_t offset =
        parametersOf<EmbeddingParameters>(args).vocabOffset + *position * rows;
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
        parametersOf<EmbeddingParameters>(args).vocabOffset + *position * rows;
    // Rows no token reads stay zero; each other element is written once,
    // summed in f32 (a 16-bit table gradient rounded once, as the CPU
    // computes it).
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(out.raw(), 0, out.bytes(), stream),
        "zeroing an embedding gradient");
    int64_t tokens = ids.size();
    if (tokens == 0 || width == 0)
      return Status::success();
    // The tokens sorted by id with CUB's stable radix sort.
    size_t sortBytes = 0;
    TRELLIS_RETURN_IF_ERROR(radixSortBytes(
        tokens, 32, stream, sortBytes, "sizing an embedding gradient's sort"));
    int64_t listBytes = ((tokens * sizeof(int32_t) + 255) / 256) * 256;
    char *scratch = nullptr;
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMallocAsync(reinterpret_cast<void **>(&scratch),
                        3 * listBytes + sortBytes, stream),
        "allocating an embedding gradient's sort");
    auto *order = reinterpret_cast<int32_t *>(scratch);
    auto *sortedIds = reinterpret_cast<int32_t *>(scratch + listBytes);
    auto *sortedTokens = reinterpret_cast<int32_t *>(scratch + 2 * listBytes);
    auto sumRows = [&]() -> Status {
      LaunchGeometry all = elementwiseGeometry(tokens);
      iotaKernel<<<all.blocks, all.threads, 0, stream>>>(order, tokens);
      TRELLIS_CUDA_RETURN_IF_ERROR(
          cub::DeviceRadixSort::SortPairs(
              scratch + 3 * listBytes, sortBytes,
              static_cast<const int32_t *>(ids.raw()), sortedIds,
              static_cast<const int32_t *>(order), sortedTokens,
              static_cast<int>(tokens), 0, 32, stream),
          "sorting an embedding gradient's tokens");
      LaunchGeometry grid = elementwiseGeometry(tokens * width);
      return onFloat(grad.desc().dtype, [&](auto type) {
        using T = decltype(type);
        return onFloat(out.desc().dtype, [&](auto tableType) {
          using W = decltype(tableType);
          embeddingGradKernel<<<grid.blocks, grid.threads, 0, stream>>>(
              sortedIds, sortedTokens, static_cast<const T *>(grad.raw()),
              static_cast<W *>(out.raw()), tokens, rows, width, offset,
              parametersOf<EmbeddingParameters>(args).paddingIndex);
          return Status::success();
        });
      });
    };
    Status status = sumRows();
    (void)cudaFreeAsync(scratch, stream);
    TRELLIS_RETURN_IF_ERROR(status);
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
      parametersOf<PositionParameters>(args).frequencies;
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
    const PositionParameters &parameters =
        parametersOf<PositionParameters>(args);
    double sign = parameters.inverse ? -1.0 : 1.0;
    TRELLIS_RETURN_IF_ERROR(onFloat(in.desc().dtype, [&](auto type) {
      using T = decltype(type);
      ropeKernel<<<grid.blocks, grid.threads, 0, context.stream>>>(
          static_cast<const T *>(in.raw()), static_cast<T *>(args.out(0).raw()),
          prepared->frequencies, batch, seq, heads, dim, *position * seq,
          seq * shardCount(args), parameters.chunks, sign,
          parameters.interleaved);
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
      count * shardCount(args), parametersOf<PositionParameters>(args).chunks);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching positions");
  return Status::success();
}

} // namespace

void registerEmbeddingKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::Embedding, {runEmbedding});
  table.addMember(PositionKind::Rope, {runRope, prepareRope});
  table.addMember(PositionKind::Positions, {runPositions});
}

} // namespace trellis::runtime::cuda
