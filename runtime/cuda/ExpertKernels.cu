//===- ExpertKernels.cu - Mixture-of-experts routing and expert products --===//
//
// As the CPU's (runtime/cpu/Experts.cpp):
//  - moe_route / moe_route_grad: a thread per token through the formulas
//    both backends compile (trellis/Common/ExpertRouting.h), with scratch
//    from a stream-ordered allocation;
//  - expert_matmul / expert_matmul_weight_grad: the slots of the experts
//    the weight holds, sorted by expert with CUB's stable radix sort (slot
//    order within an expert, as the CPU's counting sort), then one grouped
//    product over the experts' row ranges, whose sizes stay on the device
//    (no host synchronization): 64 x 64 tiles in fp32 with operands read
//    through the sorted slots (no gathered copy), each result element
//    summed in one fixed order, rounded once;
//  - with the all-to-all dispatch, the slots first go to the members
//    holding their experts, as the CPU sends them (sorted by member, slot
//    order within each), the products or rows come back the same way: the
//    counts are exchanged on the device and read by the host once per op
//    (NCCL's sends need their sizes there), the rest stays stream-ordered;
//  - expert_counts: exact integer counts (float atomics of whole numbers,
//    exact below 2^24 slots, so any order gives the same bits);
//  - expert_bias_update: the total in the CPU's order, one block.
// Expert ids are not checked on the device (the router makes them); an id
// outside [0, experts) counts for no expert and gives zeros.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "DeviceFloat.cuh"
#include "LaunchGeometry.h"
#include "RadixSort.cuh"

#include "trellis/Common/ExpertRouting.h"

#include <algorithm>
#include <string>
#include <vector>

namespace trellis::runtime::cuda {

namespace {

__global__ void routeKernel(ExpertRouting routing, const float *logits,
                            const float *bias, float *scratch,
                            int32_t *intScratch, float *weights,
                            int32_t *chosen, int64_t tokens) {
  int64_t floats = routeScratchFloats(routing);
  int64_t ints = routeScratchInts(routing);
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += int64_t(gridDim.x) * blockDim.x)
    routeToken(routing, logits + t * routing.experts, bias,
               scratch + t * floats, intScratch + t * ints,
               weights + t * routing.topK, chosen + t * routing.topK);
}

__global__ void routeGradKernel(ExpertRouting routing, const float *logits,
                                const int32_t *chosen, const float *weightsGrad,
                                float *scratch, float *out, int64_t tokens) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += int64_t(gridDim.x) * blockDim.x)
    routeTokenGrad(routing, logits + t * routing.experts,
                   chosen + t * routing.topK, weightsGrad + t * routing.topK,
                   scratch + t * routing.experts, out + t * routing.experts);
}

/// Rounds `bytes` up to 256 (CUB's and the loads' alignment).
int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

Status runRoute(const KernelArgs &args, CudaContext &context) {
  ExpertRouting routing = expertRouting(args);
  const Tensor &logits = args.in(0);
  int64_t tokens = routing.experts ? logits.size() / routing.experts : 0;
  if (tokens == 0)
    return Status::success();
  bool forward = !rowOf(args).gradient;
  int64_t floats = forward ? routeScratchFloats(routing) : routing.experts;
  int64_t ints = forward ? routeScratchInts(routing) : 0;
  int64_t floatBytes = aligned(tokens * floats * sizeof(float));
  char *scratch = nullptr;
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void **>(&scratch),
                      floatBytes + aligned(tokens * ints * sizeof(int32_t)),
                      context.stream),
      "allocating " + args.instruction.op + "'s scratch");
  LaunchGeometry grid = rowGeometry(tokens, 128);
  if (forward) {
    const float *bias = args.instruction.inputs.size() > 1
                            ? static_cast<const float *>(args.in(1).raw())
                            : nullptr;
    routeKernel<<<grid.blocks, grid.threads, 0, context.stream>>>(
        routing, static_cast<const float *>(logits.raw()), bias,
        reinterpret_cast<float *>(scratch),
        reinterpret_cast<int32_t *>(scratch + floatBytes),
        static_cast<float *>(args.out(0).raw()),
        static_cast<int32_t *>(args.out(1).raw()), tokens);
  } else {
    routeGradKernel<<<grid.blocks, grid.threads, 0, context.stream>>>(
        routing, static_cast<const float *>(logits.raw()),
        static_cast<const int32_t *>(args.in(1).raw()),
        static_cast<const float *>(args.in(2).raw()),
        reinterpret_cast<float *>(scratch),
        static_cast<float *>(args.out(0).raw()), tokens);
  }
  cudaError_t launched = cudaGetLastError();
  (void)cudaFreeAsync(scratch, context.stream);
  TRELLIS_CUDA_RETURN_IF_ERROR(launched, "launching " + args.instruction.op);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Slots sorted by expert
//===----------------------------------------------------------------------===//

/// Rows of a tile of the grouped products, and its columns.
constexpr int kTileRows = 64, kTileColumns = 64, kTileDepth = 16;
constexpr int kTileThreads = 256;

/// keys[s] = the slot's expert within the held range [first, first +
/// count), or `count` for slots of other experts; slots[s] = s.
__global__ void slotKeysKernel(const int32_t *ids, int32_t *keys,
                               int32_t *slots, int64_t count, int64_t first,
                               int64_t total) {
  for (int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < total;
       s += int64_t(gridDim.x) * blockDim.x) {
    int64_t local = int64_t(ids[s]) - first;
    keys[s] = local >= 0 && local < count ? int32_t(local) : int32_t(count);
    slots[s] = int32_t(s);
  }
}

/// starts[e] = the first sorted position of expert e (e in [0, count]:
/// starts[count] = the held slots), by binary search of the sorted keys.
__global__ void expertStartsKernel(const int32_t *sortedKeys, int32_t *starts,
                                   int64_t count, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e <= count;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t low = 0, high = total;
    while (low < high) {
      int64_t middle = (low + high) / 2;
      if (sortedKeys[middle] < e)
        low = middle + 1;
      else
        high = middle;
    }
    starts[e] = int32_t(low);
  }
}

/// tileStarts[e] = the row tiles of the experts before e (one thread: the
/// held experts of one layer are few).
__global__ void tileStartsKernel(const int32_t *starts, int32_t *tileStarts,
                                 int64_t count) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  int32_t tiles = 0;
  for (int64_t e = 0; e < count; ++e) {
    tileStarts[e] = tiles;
    tiles += (starts[e + 1] - starts[e] + kTileRows - 1) / kTileRows;
  }
  tileStarts[count] = tiles;
}

/// The slots of the held experts on the device, sorted by expert; its
/// memory is freed in stream order when it goes.
struct SortedSlots {
  SortedSlots() = default;
  SortedSlots(const SortedSlots &) = delete;
  SortedSlots &operator=(const SortedSlots &) = delete;
  ~SortedSlots() {
    if (memory)
      (void)cudaFreeAsync(memory, stream);
  }

  /// [total]: slot indices, the held experts' first, by expert.
  int32_t *slots = nullptr;
  /// [count + 1]: each expert's first position in `slots`.
  int32_t *starts = nullptr;
  /// [count + 1]: each expert's first row tile.
  int32_t *tileStarts = nullptr;
  /// The held experts [first, first + count) of all `experts`.
  int64_t first = 0, count = 0, experts = 0;
  /// Slots in all; an upper bound on the row tiles.
  int64_t total = 0, maxTiles = 0;
  char *memory = nullptr;
  cudaStream_t stream = nullptr;
};

/// Sorts the `total` slots of expert ids `ids` for the weight's `held`
/// experts (under expert parallelism the range at the rank's place).
Status sortSlots(const KernelArgs &args, const int32_t *ids, int64_t total,
                 int64_t held, cudaStream_t stream, SortedSlots &sorted) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  sorted.first = *position * held;
  sorted.count = held;
  sorted.experts = held * shardCount(args);
  sorted.total = total;
  sorted.maxTiles = (sorted.total + kTileRows - 1) / kTileRows + held;
  int endBit = 1;
  while ((int64_t(1) << endBit) <= held)
    ++endBit;
  size_t sortBytes = 0;
  TRELLIS_RETURN_IF_ERROR(
      radixSortBytes(total, endBit, stream, sortBytes,
                     "sizing " + args.instruction.op + "'s sort"));
  int64_t list = aligned(total * sizeof(int32_t));
  int64_t table = aligned((held + 1) * sizeof(int32_t));
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void **>(&sorted.memory),
                      4 * list + 2 * table + sortBytes, stream),
      "allocating " + args.instruction.op + "'s sort");
  sorted.stream = stream;
  auto *keys = reinterpret_cast<int32_t *>(sorted.memory);
  auto *slots = reinterpret_cast<int32_t *>(sorted.memory + list);
  auto *sortedKeys = reinterpret_cast<int32_t *>(sorted.memory + 2 * list);
  sorted.slots = reinterpret_cast<int32_t *>(sorted.memory + 3 * list);
  sorted.starts = reinterpret_cast<int32_t *>(sorted.memory + 4 * list);
  sorted.tileStarts =
      reinterpret_cast<int32_t *>(sorted.memory + 4 * list + table);
  char *sortScratch = sorted.memory + 4 * list + 2 * table;
  LaunchGeometry all = elementwiseGeometry(total);
  slotKeysKernel<<<all.blocks, all.threads, 0, stream>>>(ids, keys, slots, held,
                                                         sorted.first, total);
  TRELLIS_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
                                   sortScratch, sortBytes, keys, sortedKeys,
                                   slots, sorted.slots, static_cast<int>(total),
                                   0, endBit, stream),
                               "sorting " + args.instruction.op + "'s slots");
  LaunchGeometry experts = elementwiseGeometry(held + 1);
  expertStartsKernel<<<experts.blocks, experts.threads, 0, stream>>>(
      sortedKeys, sorted.starts, held, total);
  tileStartsKernel<<<1, 1, 0, stream>>>(sorted.starts, sorted.tileStarts, held);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching " + args.instruction.op + "'s sort");
  return Status::success();
}

/// The lhs row slot `slot` reads: its own, or its token's when the lhs has
/// one row per token (`slotsPerToken` > 0).
__device__ inline int64_t lhsRow(int32_t slot, int64_t slotsPerToken) {
  return slotsPerToken > 0 ? slot / slotsPerToken : slot;
}

/// Element (k, n) of held expert `e`'s matrix [K, N] ([N, K] transposed).
template <typename T>
__device__ inline float weightAt(const T *weight, int64_t e, int64_t k,
                                 int64_t n, int64_t depth, int64_t width,
                                 bool transposed) {
  int64_t matrix = e * depth * width;
  return widen(transposed ? weight[matrix + n * depth + k]
                          : weight[matrix + k * width + n]);
}

/// sums[i][j] += a[d][ty * 4 + i] * b[d][tx * 4 + j] over the depth d of
/// the tiles in shared memory, in order.
__device__ inline void accumulateTiles(const float (*a)[kTileRows + 1],
                                       const float (*b)[kTileColumns + 1],
                                       float (&sums)[4][4]) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int d = 0; d < kTileDepth; ++d)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        sums[i][j] = fmaf(a[d][ty * 4 + i], b[d][tx * 4 + j], sums[i][j]);
}

/// One 64 x 64 tile of an expert's products: block x walks the row tiles
/// of all experts (finding its expert in tileStarts), block y the columns.
/// A thread owns 4 x 4 results, summed over the depth in order.
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    groupedMatmulKernel(const T *lhs, const T *weight, T *out,
                        const int32_t *slots, const int32_t *starts,
                        const int32_t *tileStarts, int64_t count, int64_t depth,
                        int64_t width, int64_t slotsPerToken, bool transposed) {
  int64_t tile = blockIdx.x;
  if (tile >= tileStarts[count])
    return;
  int64_t low = 0, high = count - 1;
  while (low < high) {
    int64_t middle = (low + high + 1) / 2;
    if (tileStarts[middle] <= tile)
      low = middle;
    else
      high = middle - 1;
  }
  int64_t e = low;
  int64_t rowBegin = starts[e] + (tile - tileStarts[e]) * kTileRows;
  int64_t rowEnd = rowBegin + kTileRows < starts[e + 1]
                       ? rowBegin + kTileRows
                       : int64_t(starts[e + 1]);
  int64_t columnBegin = int64_t(blockIdx.y) * kTileColumns;
  __shared__ float lhsTile[kTileDepth][kTileRows + 1];
  __shared__ float weightTile[kTileDepth][kTileColumns + 1];
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float sums[4][4] = {};
  for (int64_t k0 = 0; k0 < depth; k0 += kTileDepth) {
    for (int i = threadIdx.x; i < kTileDepth * kTileRows; i += kTileThreads) {
      int r = i / kTileDepth, kk = i % kTileDepth;
      int64_t row = rowBegin + r, k = k0 + kk;
      lhsTile[kk][r] =
          row < rowEnd && k < depth
              ? widen(lhs[lhsRow(slots[row], slotsPerToken) * depth + k])
              : 0.0f;
    }
    for (int i = threadIdx.x; i < kTileDepth * kTileColumns;
         i += kTileThreads) {
      int kk = i / kTileColumns, c = i % kTileColumns;
      int64_t k = k0 + kk, n = columnBegin + c;
      weightTile[kk][c] =
          k < depth && n < width
              ? weightAt(weight, e, k, n, depth, width, transposed)
              : 0.0f;
    }
    __syncthreads();
    accumulateTiles(lhsTile, weightTile, sums);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    int64_t row = rowBegin + ty * 4 + i;
    if (row >= rowEnd)
      continue;
    for (int j = 0; j < 4; ++j) {
      int64_t n = columnBegin + tx * 4 + j;
      if (n < width)
        out[int64_t(slots[row]) * width + n] = narrow<T>(sums[i][j]);
    }
  }
}

/// One 64 x 64 tile of held expert blockIdx.y's weight gradient (in the
/// [K, N] orientation; stored transposed with `transposed`): the sum over
/// the expert's slots, in sorted order, of lhs row (x) result-gradient row.
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    groupedWeightGradKernel(const T *lhs, const T *grad, T *out,
                            const int32_t *slots, const int32_t *starts,
                            int64_t depth, int64_t width, int64_t slotsPerToken,
                            bool transposed) {
  int64_t e = blockIdx.y;
  int64_t columnTiles = (width + kTileColumns - 1) / kTileColumns;
  int64_t kBegin = (int64_t(blockIdx.x) / columnTiles) * kTileRows;
  int64_t nBegin = (int64_t(blockIdx.x) % columnTiles) * kTileColumns;
  int64_t rowBegin = starts[e], rowEnd = starts[e + 1];
  __shared__ float lhsTile[kTileDepth][kTileRows + 1];
  __shared__ float gradTile[kTileDepth][kTileColumns + 1];
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float sums[4][4] = {};
  for (int64_t r0 = rowBegin; r0 < rowEnd; r0 += kTileDepth) {
    for (int i = threadIdx.x; i < kTileDepth * kTileRows; i += kTileThreads) {
      int rr = i / kTileRows, c = i % kTileRows;
      int64_t row = r0 + rr, k = kBegin + c;
      lhsTile[rr][c] =
          row < rowEnd && k < depth
              ? widen(lhs[lhsRow(slots[row], slotsPerToken) * depth + k])
              : 0.0f;
    }
    for (int i = threadIdx.x; i < kTileDepth * kTileColumns;
         i += kTileThreads) {
      int rr = i / kTileColumns, c = i % kTileColumns;
      int64_t row = r0 + rr, n = nBegin + c;
      gradTile[rr][c] = row < rowEnd && n < width
                            ? widen(grad[int64_t(slots[row]) * width + n])
                            : 0.0f;
    }
    __syncthreads();
    accumulateTiles(lhsTile, gradTile, sums);
    __syncthreads();
  }
  int64_t matrix = e * depth * width;
  for (int i = 0; i < 4; ++i) {
    int64_t k = kBegin + ty * 4 + i;
    if (k >= depth)
      continue;
    for (int j = 0; j < 4; ++j) {
      int64_t n = nBegin + tx * 4 + j;
      if (n < width)
        out[matrix + (transposed ? n * depth + k : k * width + n)] =
            narrow<T>(sums[i][j]);
    }
  }
}

/// The grouped product of the sorted slots' lhs rows (a row per slot, or
/// per token of `slotsPerToken` slots) with their experts' weights (operand
/// 1) into `out` (a row per slot).
template <typename T>
Status launchGroupedMatmul(const KernelArgs &args, const T *lhs, T *out,
                           const SortedSlots &sorted, int64_t depth,
                           int64_t width, int64_t slotsPerToken) {
  dim3 grid(static_cast<unsigned>(sorted.maxTiles),
            static_cast<unsigned>((width + kTileColumns - 1) / kTileColumns));
  groupedMatmulKernel<T><<<grid, kTileThreads, 0, sorted.stream>>>(
      lhs, static_cast<const T *>(args.in(1).raw()), out, sorted.slots,
      sorted.starts, sorted.tileStarts, sorted.count, depth, width,
      slotsPerToken, parametersOf<ExpertParameters>(args).transposeRhs);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching expert_matmul");
  return Status::success();
}

/// Each held expert's weight gradient (the op's result) from the sorted
/// slots' lhs rows and result-gradient rows (a row per slot).
template <typename T>
Status launchGroupedWeightGrad(const KernelArgs &args, const T *lhs,
                               const T *grad, const SortedSlots &sorted,
                               int64_t depth, int64_t width,
                               int64_t slotsPerToken) {
  int64_t tiles = ((depth + kTileRows - 1) / kTileRows) *
                  ((width + kTileColumns - 1) / kTileColumns);
  dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(sorted.count));
  groupedWeightGradKernel<T><<<grid, kTileThreads, 0, sorted.stream>>>(
      lhs, grad, static_cast<T *>(args.out(0).raw()), sorted.slots,
      sorted.starts, depth, width, slotsPerToken,
      parametersOf<ExpertParameters>(args).transposeRhs);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching expert_matmul_weight_grad");
  return Status::success();
}

//===----------------------------------------------------------------------===//
// The all-to-all dispatch
//===----------------------------------------------------------------------===//

/// Stream-ordered allocations freed together, in stream order, when it
/// goes (whatever path returns).
class StreamScratch {
public:
  explicit StreamScratch(cudaStream_t stream) : stream_(stream) {}
  StreamScratch(const StreamScratch &) = delete;
  StreamScratch &operator=(const StreamScratch &) = delete;
  ~StreamScratch() {
    for (void *memory : allocations_)
      (void)cudaFreeAsync(memory, stream_);
  }
  /// `count` elements of T (at least one byte).
  template <typename T>
  Status allocate(T *&memory, int64_t count, const std::string &what) {
    void *data = nullptr;
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMallocAsync(&data, std::max<int64_t>(count * int64_t(sizeof(T)), 1),
                        stream_),
        "allocating " + what);
    allocations_.push_back(data);
    memory = static_cast<T *>(data);
    return Status::success();
  }

private:
  cudaStream_t stream_;
  std::vector<void *> allocations_;
};

/// keys[s] = the member holding slot s's expert (its id over the experts
/// each member holds); slots[s] = s.
__global__ void memberKeysKernel(const int32_t *ids, int32_t *keys,
                                 int32_t *slots, int64_t held, int64_t total) {
  for (int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < total;
       s += int64_t(gridDim.x) * blockDim.x) {
    keys[s] = ids[s] >= 0 ? int32_t(ids[s] / held) : int32_t(0x7fffffff);
    slots[s] = int32_t(s);
  }
}

/// counts[m] = starts[m + 1] - starts[m].
__global__ void countsFromStartsKernel(const int32_t *starts, int32_t *counts,
                                       int64_t members) {
  for (int64_t m = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; m < members;
       m += int64_t(gridDim.x) * blockDim.x)
    counts[m] = starts[m + 1] - starts[m];
}

/// out[i] = the row of slot order[i] (its own, or its token's with
/// `slotsPerToken` > 0), `width` elements, for i < count.
template <typename T>
__global__ void gatherRowsKernel(const T *source, T *out, const int32_t *order,
                                 int64_t count, int64_t width,
                                 int64_t slotsPerToken) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count * width; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / width, c = i % width;
    out[i] = source[lhsRow(order[r], slotsPerToken) * width + c];
  }
}

/// out[order[i]] = the i-th row of `source`, for i < count.
template <typename T>
__global__ void scatterRowsKernel(const T *source, T *out, const int32_t *order,
                                  int64_t count, int64_t width) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count * width; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / width, c = i % width;
    out[int64_t(order[r]) * width + c] = source[i];
  }
}

/// This rank's slots sent to the members holding their experts, as the
/// CPU sends them (runtime/cpu/Experts.cpp): sorted by member, stable.
struct SlotExchange {
  /// [sent] this rank's slots in the order sent.
  int32_t *order = nullptr;
  /// Slots sent to and received from each member (host).
  std::vector<int64_t> sendCounts, recvCounts;
  int64_t sent = 0, received = 0;
  /// [received] the received slots' expert ids, member after member.
  int32_t *receivedIds = nullptr;
};

/// Sorts the slots of `ids` by member, exchanges the counts (the host
/// reads them: the one wait of the op) and the expert ids.
Status exchangeSlots(const KernelArgs &args, CudaContext &context,
                     const Tensor &ids, int64_t held, StreamScratch &scratch,
                     SlotExchange &exchange) {
  if (!args.comm || !context.exchange || !context.waitOnHost)
    return Status::error("cuda: " + args.instruction.op +
                         " with the all-to-all dispatch needs its group's "
                         "communicator (run the plan with its ranks)");
  cudaStream_t stream = context.stream;
  const std::string &op = args.instruction.op;
  int64_t total = ids.size(), members = shardCount(args);
  int32_t *keys = nullptr, *slots = nullptr, *sortedKeys = nullptr,
          *starts = nullptr, *counts = nullptr;
  TRELLIS_RETURN_IF_ERROR(scratch.allocate(keys, total, op + "'s keys"));
  TRELLIS_RETURN_IF_ERROR(scratch.allocate(slots, total, op + "'s slots"));
  TRELLIS_RETURN_IF_ERROR(
      scratch.allocate(sortedKeys, total, op + "'s sorted keys"));
  TRELLIS_RETURN_IF_ERROR(
      scratch.allocate(exchange.order, total, op + "'s send order"));
  TRELLIS_RETURN_IF_ERROR(
      scratch.allocate(starts, members + 1, op + "'s member starts"));
  TRELLIS_RETURN_IF_ERROR(
      scratch.allocate(counts, 2 * members, op + "'s counts"));
  // Keys up to members - 1; an id outside every member's range sorts last
  // and goes nowhere (its result rows stay zero).
  int endBit = 31;
  size_t sortBytes = 0;
  TRELLIS_RETURN_IF_ERROR(radixSortBytes(total, endBit, stream, sortBytes,
                                         "sizing " + op + "'s sort by member"));
  char *sortScratch = nullptr;
  TRELLIS_RETURN_IF_ERROR(
      scratch.allocate(sortScratch, int64_t(sortBytes), op + "'s sort"));
  LaunchGeometry all = elementwiseGeometry(total);
  memberKeysKernel<<<all.blocks, all.threads, 0, stream>>>(
      static_cast<const int32_t *>(ids.raw()), keys, slots, held, total);
  TRELLIS_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
                                   sortScratch, sortBytes, keys, sortedKeys,
                                   slots, exchange.order,
                                   static_cast<int>(total), 0, endBit, stream),
                               "sorting " + op + "'s slots by member");
  LaunchGeometry memberGrid = elementwiseGeometry(members + 1);
  expertStartsKernel<<<memberGrid.blocks, memberGrid.threads, 0, stream>>>(
      sortedKeys, starts, members, total);
  countsFromStartsKernel<<<memberGrid.blocks, memberGrid.threads, 0, stream>>>(
      starts, counts, members);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching " + op + "'s sort by member");
  TRELLIS_RETURN_IF_ERROR(context.exchange([&] {
    return args.comm->allToAll(args.axes, counts, counts + members, 1,
                               DType::I32);
  }));
  std::vector<int32_t> hostCounts(2 * members);
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(hostCounts.data(), counts,
                      hostCounts.size() * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, stream),
      "reading " + op + "'s counts");
  TRELLIS_RETURN_IF_ERROR(
      context.waitOnHost("waiting for " + op + "'s exchanged counts"));
  exchange.sendCounts.assign(hostCounts.begin(), hostCounts.begin() + members);
  exchange.recvCounts.assign(hostCounts.begin() + members, hostCounts.end());
  exchange.sent = exchange.received = 0;
  for (int64_t m = 0; m < members; ++m) {
    exchange.sent += exchange.sendCounts[m];
    exchange.received += exchange.recvCounts[m];
  }
  int32_t *sentIds = nullptr;
  TRELLIS_RETURN_IF_ERROR(
      scratch.allocate(sentIds, exchange.sent, op + "'s sent ids"));
  TRELLIS_RETURN_IF_ERROR(scratch.allocate(
      exchange.receivedIds, exchange.received, op + "'s received ids"));
  LaunchGeometry sentGrid = elementwiseGeometry(exchange.sent);
  gatherRowsKernel<int32_t><<<sentGrid.blocks, sentGrid.threads, 0, stream>>>(
      static_cast<const int32_t *>(ids.raw()), sentIds, exchange.order,
      exchange.sent, 1, 0);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching " + op + "'s id gather");
  return context.exchange([&] {
    return args.comm->allToAllV(args.axes, sentIds, exchange.sendCounts,
                                exchange.receivedIds, exchange.recvCounts,
                                DType::I32);
  });
}

/// `counts` rows of `width` elements each.
std::vector<int64_t> rowElements(const std::vector<int64_t> &counts,
                                 int64_t width) {
  std::vector<int64_t> elements = counts;
  for (int64_t &count : elements)
    count *= width;
  return elements;
}

/// Sends each sent slot's row of `source` (a row per slot, or per token
/// of `slotsPerToken` slots) where the exchange sent the slot; `received`
/// gets the received slots' rows.
template <typename T>
Status sendRows(const KernelArgs &args, CudaContext &context,
                const SlotExchange &exchange, const T *source, int64_t width,
                int64_t slotsPerToken, StreamScratch &scratch, T *&received) {
  const std::string &op = args.instruction.op;
  T *sent = nullptr;
  TRELLIS_RETURN_IF_ERROR(
      scratch.allocate(sent, exchange.sent * width, op + "'s sent rows"));
  TRELLIS_RETURN_IF_ERROR(scratch.allocate(received, exchange.received * width,
                                           op + "'s received rows"));
  LaunchGeometry grid = elementwiseGeometry(exchange.sent * width);
  gatherRowsKernel<T><<<grid.blocks, grid.threads, 0, context.stream>>>(
      source, sent, exchange.order, exchange.sent, width, slotsPerToken);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching " + op + "'s row gather");
  DType dtype = args.in(0).desc().dtype;
  return context.exchange([&] {
    return args.comm->allToAllV(
        args.axes, sent, rowElements(exchange.sendCounts, width), received,
        rowElements(exchange.recvCounts, width), dtype);
  });
}

/// What both products start from under the all-to-all dispatch: the
/// slots exchanged, and the lhs (operand 0) rows of the received slots.
template <typename T>
Status exchangeSlotsAndRows(const KernelArgs &args, CudaContext &context,
                            int64_t held, StreamScratch &scratch,
                            SlotExchange &exchange, T *&rows) {
  const Tensor &lhs = args.in(0), &ids = args.in(2);
  bool perToken = lhs.shape().size() == ids.shape().size();
  TRELLIS_RETURN_IF_ERROR(
      exchangeSlots(args, context, ids, held, scratch, exchange));
  return sendRows<T>(args, context, exchange, static_cast<const T *>(lhs.raw()),
                     lhs.shape().back(), perToken ? ids.shape().back() : 0,
                     scratch, rows);
}

/// expert_matmul with the all-to-all dispatch: the slots' rows go to the
/// members holding their experts, each member multiplies what it received
/// (sorted by expert, as without the dispatch), and the products come back
/// to the slots they belong to.
template <typename T>
Status multiplyExchanged(const KernelArgs &args, CudaContext &context) {
  const Tensor &lhs = args.in(0), &weight = args.in(1);
  Tensor &out = args.out(0);
  cudaStream_t stream = context.stream;
  int64_t held = weight.shape()[0];
  int64_t depth = lhs.shape().back(), width = out.shape().back();
  StreamScratch scratch(stream);
  SlotExchange exchange;
  T *rows = nullptr;
  TRELLIS_RETURN_IF_ERROR(
      exchangeSlotsAndRows<T>(args, context, held, scratch, exchange, rows));
  T *products = nullptr;
  TRELLIS_RETURN_IF_ERROR(scratch.allocate(products, exchange.received * width,
                                           "expert_matmul's products"));
  if (exchange.received > 0 && held > 0 && width > 0) {
    SortedSlots sorted;
    TRELLIS_RETURN_IF_ERROR(sortSlots(args, exchange.receivedIds,
                                      exchange.received, held, stream, sorted));
    TRELLIS_RETURN_IF_ERROR(
        launchGroupedMatmul<T>(args, rows, products, sorted, depth, width, 0));
  }
  // Each product back to the member whose slot it is.
  T *home = nullptr;
  TRELLIS_RETURN_IF_ERROR(scratch.allocate(home, exchange.sent * width,
                                           "expert_matmul's returned rows"));
  TRELLIS_RETURN_IF_ERROR(context.exchange([&] {
    return args.comm->allToAllV(
        args.axes, products, rowElements(exchange.recvCounts, width), home,
        rowElements(exchange.sendCounts, width), lhs.desc().dtype);
  }));
  LaunchGeometry grid = elementwiseGeometry(exchange.sent * width);
  scatterRowsKernel<T><<<grid.blocks, grid.threads, 0, stream>>>(
      home, static_cast<T *>(out.raw()), exchange.order, exchange.sent, width);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching expert_matmul's scatter");
  return Status::success();
}

/// expert_matmul_weight_grad with the all-to-all dispatch: the slots' lhs
/// rows and result-gradient rows go to the members holding their experts,
/// which sum them per expert.
template <typename T>
Status weightGradExchanged(const KernelArgs &args, CudaContext &context) {
  const Tensor &lhs = args.in(0), &grad = args.in(1);
  Tensor &out = args.out(0);
  cudaStream_t stream = context.stream;
  int64_t held = out.shape()[0];
  int64_t depth = lhs.shape().back(), width = grad.shape().back();
  StreamScratch scratch(stream);
  SlotExchange exchange;
  T *rows = nullptr, *grads = nullptr;
  TRELLIS_RETURN_IF_ERROR(
      exchangeSlotsAndRows<T>(args, context, held, scratch, exchange, rows));
  TRELLIS_RETURN_IF_ERROR(sendRows<T>(args, context, exchange,
                                      static_cast<const T *>(grad.raw()), width,
                                      0, scratch, grads));
  if (out.size() == 0)
    return Status::success();
  if (exchange.received == 0) {
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(out.raw(), 0, out.bytes(), stream),
        "zeroing an expert weight gradient");
    return Status::success();
  }
  SortedSlots sorted;
  TRELLIS_RETURN_IF_ERROR(sortSlots(args, exchange.receivedIds,
                                    exchange.received, held, stream, sorted));
  return launchGroupedWeightGrad<T>(args, rows, grads, sorted, depth, width, 0);
}

bool dispatchesAllToAll(const KernelArgs &args) {
  return parametersOf<ExpertParameters>(args).allToAll;
}

Status runExpertMatmul(const KernelArgs &args, CudaContext &context) {
  const Tensor &lhs = args.in(0), &weight = args.in(1), &ids = args.in(2);
  Tensor &out = args.out(0);
  cudaStream_t stream = context.stream;
  // Slots of experts held elsewhere are zeros; the rest is written once.
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(out.raw(), 0, out.bytes(), stream),
      "zeroing an expert_matmul result");
  int64_t held = weight.shape()[0];
  int64_t depth = lhs.shape().back(), width = out.shape().back();
  if (dispatchesAllToAll(args))
    // Every member takes part in the exchange, whatever its own slots.
    return onFloat(lhs.desc().dtype, [&](auto type) {
      return multiplyExchanged<decltype(type)>(args, context);
    });
  if (ids.size() == 0 || held == 0 || width == 0 || depth == 0)
    return Status::success();
  SortedSlots sorted;
  TRELLIS_RETURN_IF_ERROR(sortSlots(args,
                                    static_cast<const int32_t *>(ids.raw()),
                                    ids.size(), held, stream, sorted));
  bool perToken = lhs.shape().size() == ids.shape().size();
  return onFloat(lhs.desc().dtype, [&](auto type) {
    using T = decltype(type);
    return launchGroupedMatmul<T>(args, static_cast<const T *>(lhs.raw()),
                                  static_cast<T *>(out.raw()), sorted, depth,
                                  width, perToken ? ids.shape().back() : 0);
  });
}

Status runExpertWeightGrad(const KernelArgs &args, CudaContext &context) {
  const Tensor &lhs = args.in(0), &grad = args.in(1), &ids = args.in(2);
  Tensor &out = args.out(0);
  cudaStream_t stream = context.stream;
  int64_t held = out.shape()[0];
  int64_t depth = lhs.shape().back(), width = grad.shape().back();
  if (dispatchesAllToAll(args))
    return onFloat(lhs.desc().dtype, [&](auto type) {
      return weightGradExchanged<decltype(type)>(args, context);
    });
  if (out.size() == 0)
    return Status::success();
  if (ids.size() == 0) {
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(out.raw(), 0, out.bytes(), stream),
        "zeroing an expert weight gradient");
    return Status::success();
  }
  SortedSlots sorted;
  TRELLIS_RETURN_IF_ERROR(sortSlots(args,
                                    static_cast<const int32_t *>(ids.raw()),
                                    ids.size(), held, stream, sorted));
  bool perToken = lhs.shape().size() == ids.shape().size();
  return onFloat(lhs.desc().dtype, [&](auto type) {
    using T = decltype(type);
    return launchGroupedWeightGrad<T>(args, static_cast<const T *>(lhs.raw()),
                                      static_cast<const T *>(grad.raw()),
                                      sorted, depth, width,
                                      perToken ? ids.shape().back() : 0);
  });
}

//===----------------------------------------------------------------------===//
// Counts and the score bias
//===----------------------------------------------------------------------===//

__global__ void expertCountsKernel(const int32_t *ids, float *counts,
                                   int64_t slots, int64_t experts) {
  for (int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < slots;
       s += int64_t(gridDim.x) * blockDim.x)
    if (ids[s] >= 0 && ids[s] < experts)
      atomicAdd(counts + ids[s], 1.0f);
}

Status runExpertCounts(const KernelArgs &args, CudaContext &context) {
  const Tensor &ids = args.in(0);
  Tensor &out = args.out(0);
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(out.raw(), 0, out.bytes(), context.stream),
      "zeroing expert counts");
  if (ids.size() == 0)
    return Status::success();
  LaunchGeometry grid = elementwiseGeometry(ids.size());
  expertCountsKernel<<<grid.blocks, grid.threads, 0, context.stream>>>(
      static_cast<const int32_t *>(ids.raw()), static_cast<float *>(out.raw()),
      ids.size(), out.size());
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching expert_counts");
  return Status::success();
}

/// bias + rate * sign(mean - count) per expert; the mean from the counts
/// summed in expert order (one thread), as the CPU sums them.
__global__ void expertBiasUpdateKernel(const float *bias, const float *counts,
                                       float *out, int64_t experts,
                                       double rate) {
  __shared__ double mean;
  if (threadIdx.x == 0) {
    double total = 0;
    for (int64_t e = 0; e < experts; ++e)
      total += counts[e];
    mean = experts ? total / experts : 0;
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    double offset = mean - counts[e];
    double sign = offset > 0 ? 1 : offset < 0 ? -1 : 0;
    out[e] = static_cast<float>(bias[e] + rate * sign);
  }
}

Status runExpertBiasUpdate(const KernelArgs &args, CudaContext &context) {
  const Tensor &bias = args.in(0), &counts = args.in(1);
  if (bias.size() == 0)
    return Status::success();
  expertBiasUpdateKernel<<<1, 256, 0, context.stream>>>(
      static_cast<const float *>(bias.raw()),
      static_cast<const float *>(counts.raw()),
      static_cast<float *>(args.out(0).raw()), bias.size(),
      parametersOf<ExpertParameters>(args).rate);
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(),
                               "launching expert_bias_update");
  return Status::success();
}

} // namespace

void registerExpertKernels(CudaKernelTable &table) {
  table.addMember(ExpertKind::Route, {runRoute});
  // The all-to-all dispatch reads its exchanged counts on the host.
  table.addMember(ExpertKind::Matmul,
                  {runExpertMatmul, nullptr, dispatchesAllToAll},
                  {runExpertWeightGrad, nullptr, dispatchesAllToAll});
  table.addMember(ExpertKind::Counts, {runExpertCounts});
  table.addMember(ExpertKind::BiasUpdate, {runExpertBiasUpdate});
}

} // namespace trellis::runtime::cuda
