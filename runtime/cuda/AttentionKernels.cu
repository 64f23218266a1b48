//===- AttentionKernels.cu - Attention, its gradient, ring blocks ---------===//
//
// attention, attention_grad, attention_block, attention_merge and
// attention_block_grad with the CPU kernels' contract
// (runtime/cpu/BlockedAttention.h): queries [batch, querySeq, queryHeads,
// dim], keys and values [batch, keySeq, kvHeads, dim], query head h reading
// kv head h / (queryHeads / kvHeads); scores scale q k^T, soft-capped
// (c tanh(s / c)) when softcap > 0, plus ALiBi's slope * (key position -
// query position) when the instruction has slopes, then masked (causal,
// perhaps a sliding window, comparing each stored index's place in the
// sequence: trellis/Common/SequenceChunks.h, zigzag chunks included); rows
// without a visible key give zeros and a log-sum-exp of -inf. A head's
// sink is a key of logit sinks[h] and value zero that every row sees: the
// rows' sums start with it, and its gradient is -sum over rows of
// exp(sink - lse) * D, summed per head in one order (sinkGradKernel).
//
// FlashAttention-2's algorithm on CUDA cores, in fp32 whatever the operands'
// dtype (16-bit values are widened on load and results rounded once, as
// the CPU computes them on fp32 copies):
// - forward: a warp per query row, a block of kRowsPerBlock rows of one
//   head sharing tiles of kTile keys and values in shared memory; each lane
//   scores one key of the tile, the row keeps a running maximum and sum
//   (online softmax) and each lane a share of the result's columns. A tile
//   no row of the block sees is skipped whole.
// - backward: the rows' D = sum(dO * O); the query gradient as the forward
//   (a warp per query row over the key tiles); the key and value gradients
//   with a warp per key row over the query tiles of every query head of
//   its group, in head order. No atomics: every element's sum has one
//   order, so every run gives the same bits.
// attention_grad recomputes the forward's result and log-sum-exp (in fp32
// scratch) first; the plan keeps neither. Where cuDNN's fused attention
// covers an attention or attention_grad instruction (CudnnAttention.h),
// its graphs, built when the plan loads, run instead.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#ifdef TRELLIS_HAVE_CUDNN_FRONTEND
#include "CudnnAttention.h"
#endif
#include "DeviceFloat.cuh"
#include "LaunchGeometry.h"

#include "trellis/Common/SequenceChunks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

namespace trellis::runtime::cuda {

namespace {

/// Keys (or queries) per shared-memory tile: one per lane.
constexpr int kTile = 32;
/// Rows (warps) per block.
constexpr int kRowsPerBlock = 8;
/// The widest head: each lane keeps dim / 32 result columns in registers.
constexpr int kMaxDim = 256;
constexpr int kColumnsPerLane = kMaxDim / 32;
constexpr unsigned kAllLanes = 0xffffffffu;

/// Where an attention's rows sit in the sequence, and its score rule.
struct AttentionGeometry {
  int64_t batch, querySeq, keySeq, queryHeads, kvHeads, dim;
  /// Query i is at sequencePosition(queryFirst + i, length, chunks); key j
  /// at sequencePosition(keyFirst + j, length, chunks).
  int64_t queryFirst, keyFirst, length, chunks;
  float scale, softcap;
  bool causal;
  int64_t window;
  /// ALiBi's slopes and the sinks, one per query head (fp32 copies; null:
  /// none).
  const float *alibiSlopes, *sinks;

  __device__ int64_t queryPosition(int64_t i) const {
    return sequencePosition(queryFirst + i, length, chunks);
  }
  __device__ int64_t keyPosition(int64_t j) const {
    return sequencePosition(keyFirst + j, length, chunks);
  }
  __device__ bool visible(int64_t query, int64_t key) const {
    if (!causal)
      return true;
    return key <= query && (window <= 0 || key > query - window);
  }
  __device__ int64_t queryOffset(int64_t b, int64_t i, int64_t h) const {
    return ((b * querySeq + i) * queryHeads + h) * dim;
  }
  __device__ int64_t kvOffset(int64_t b, int64_t j, int64_t g) const {
    return ((b * keySeq + j) * kvHeads + g) * dim;
  }
  __device__ int64_t rowOffset(int64_t b, int64_t h, int64_t i) const {
    return (b * queryHeads + h) * querySeq + i;
  }
  /// The capped score of raw score `raw`, and d(capped)/d(raw) in `slope`.
  __device__ float cap(float raw, float &slope) const {
    slope = 1.0f;
    if (softcap <= 0)
      return raw;
    float t = tanhf(raw / softcap);
    slope = 1.0f - t * t;
    return softcap * t;
  }
  /// Head h's score of key position `key` for query position `query`
  /// from the raw scale q k^T: capped, then ALiBi's distance term.
  __device__ float score(float raw, int64_t h, int64_t query, int64_t key,
                         float &slope) const {
    float capped = cap(raw, slope);
    if (alibiSlopes)
      capped += alibiSlopes[h] * static_cast<float>(key - query);
    return capped;
  }
};

__device__ inline float warpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(kAllLanes, value, offset));
  return value;
}

__device__ inline float warpSum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(kAllLanes, value, offset);
  return value;
}

/// Copies `rows` rows of `dim` elements (source rows `stride` elements
/// apart, from `first`; rows past `count` zero) into shared memory rows
/// `dim + 1` floats apart (no bank conflicts between lanes reading a
/// column each).
template <typename T>
__device__ void loadTile(float *tile, const T *source, int64_t first,
                         int64_t count, int64_t stride, int64_t dim) {
  for (int64_t e = threadIdx.x; e < kTile * dim; e += blockDim.x) {
    int64_t r = e / dim, c = e % dim;
    tile[r * (dim + 1) + c] =
        first + r < count ? widen(source[(first + r) * stride + c]) : 0.0f;
  }
}

/// When a row of the block sees a key of the tile at `j0` (`seen`: this
/// lane's key for this warp's row), loads the tile's keys and values of kv
/// head `kv` into shared memory and returns true; every thread of the
/// block calls it and gets the same answer.
template <typename T>
__device__ bool loadKeyValueTiles(bool seen, const AttentionGeometry &g,
                                  const T *key, const T *value, int64_t b,
                                  int64_t kv, int64_t j0, float *keys,
                                  float *values) {
  if (!__syncthreads_or(__any_sync(kAllLanes, seen)))
    return false;
  int64_t stride = g.kvHeads * g.dim,
          first = (b * g.keySeq) * stride + kv * g.dim;
  loadTile(keys, key + first, j0, g.keySeq, stride, g.dim);
  loadTile(values, value + first, j0, g.keySeq, stride, g.dim);
  __syncthreads();
  return true;
}

/// Dot product of a shared row with a shared (padded) row.
__device__ inline float dot(const float *a, const float *b, int64_t dim) {
  float sum = 0;
  for (int64_t c = 0; c < dim; ++c)
    sum += a[c] * b[c];
  return sum;
}

/// out = attention of each query row, logSumExp (may be null) its
/// log-sum-exp. Grid: (query rows / kRowsPerBlock, queryHeads, batch).
template <typename T, typename R>
__global__ void attentionForward(AttentionGeometry g, const T *query,
                                 const T *key, const T *value, R *out,
                                 float *logSumExp) {
  extern __shared__ float shared[];
  int64_t dim = g.dim, padded = dim + 1;
  float *keys = shared, *values = keys + kTile * padded,
        *queries = values + kTile * padded;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t b = blockIdx.z, h = blockIdx.y;
  int64_t kv = h / (g.queryHeads / g.kvHeads);
  int64_t i = int64_t(blockIdx.x) * kRowsPerBlock + warp;
  bool row = i < g.querySeq;
  float *q = queries + warp * padded;
  int64_t queryPosition = row ? g.queryPosition(i) : 0;
  if (row)
    for (int64_t c = lane; c < dim; c += 32)
      q[c] = widen(query[g.queryOffset(b, i, h) + c]);

  float o[kColumnsPerLane] = {};
  // The sink (a key of value zero) is in every row's sum from the start.
  float max = g.sinks ? g.sinks[h] : -INFINITY, sum = g.sinks ? 1.0f : 0.0f;
  for (int64_t j0 = 0; j0 < g.keySeq; j0 += kTile) {
    int64_t j = j0 + lane;
    int64_t keyPosition = j < g.keySeq ? g.keyPosition(j) : 0;
    bool seen = row && j < g.keySeq && g.visible(queryPosition, keyPosition);
    if (!loadKeyValueTiles(seen, g, key, value, b, kv, j0, keys, values))
      continue;
    float slope;
    float score = seen ? g.score(g.scale * dot(q, keys + lane * padded, dim), h,
                                 queryPosition, keyPosition, slope)
                       : -INFINITY;
    float tileMax = warpMax(score);
    if (tileMax != -INFINITY) {
      float newMax = fmaxf(max, tileMax);
      float rescale = expf(max - newMax);
      float p = seen ? expf(score - newMax) : 0.0f;
      sum = sum * rescale + warpSum(p);
      for (int k = 0; k < kColumnsPerLane; ++k)
        o[k] *= rescale;
      for (int jj = 0; jj < kTile; ++jj) {
        float pj = __shfl_sync(kAllLanes, p, jj);
        if (pj == 0.0f)
          continue;
        for (int k = 0; k < kColumnsPerLane; ++k)
          if (int64_t c = lane + 32 * k; c < dim)
            o[k] += pj * values[jj * padded + c];
      }
      max = newMax;
    }
    __syncthreads();
  }
  if (!row)
    return;
  float inverse = sum > 0 ? 1.0f / sum : 0.0f;
  for (int k = 0; k < kColumnsPerLane; ++k)
    if (int64_t c = lane + 32 * k; c < dim)
      out[g.queryOffset(b, i, h) + c] = narrow<R>(o[k] * inverse);
  if (logSumExp && lane == 0)
    logSumExp[g.rowOffset(b, h, i)] = sum > 0 ? max + logf(sum) : -INFINITY;
}

/// D = sum over the row of dO * O, per query row. One warp per row.
template <typename T, typename R>
__global__ void rowDots(AttentionGeometry g, const R *result,
                        const T *resultGrad, float *dots) {
  int64_t rows = g.batch * g.querySeq * g.queryHeads;
  int lane = threadIdx.x % 32;
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       r < rows; r += int64_t(gridDim.x) * blockDim.x / 32) {
    // r indexes [batch, seq, heads] rows.
    int64_t h = r % g.queryHeads, i = (r / g.queryHeads) % g.querySeq,
            b = r / (g.queryHeads * g.querySeq);
    float sum = 0;
    for (int64_t c = lane; c < g.dim; c += 32)
      sum += widen(result[r * g.dim + c]) * widen(resultGrad[r * g.dim + c]);
    sum = warpSum(sum);
    if (lane == 0)
      dots[g.rowOffset(b, h, i)] = sum;
  }
}

/// dq for each query row. Grid as attentionForward's.
template <typename T>
__global__ void attentionGradQuery(AttentionGeometry g, const T *query,
                                   const T *key, const T *value,
                                   const T *resultGrad, const float *logSumExp,
                                   const float *dots, T *queryGrad) {
  extern __shared__ float shared[];
  int64_t dim = g.dim, padded = dim + 1;
  float *keys = shared, *values = keys + kTile * padded,
        *queries = values + kTile * padded,
        *grads = queries + kRowsPerBlock * padded;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t b = blockIdx.z, h = blockIdx.y;
  int64_t kv = h / (g.queryHeads / g.kvHeads);
  int64_t i = int64_t(blockIdx.x) * kRowsPerBlock + warp;
  bool row = i < g.querySeq;
  float *q = queries + warp * padded, *dOut = grads + warp * padded;
  int64_t queryPosition = 0;
  float rowLogSumExp = -INFINITY, rowDot = 0;
  if (row) {
    queryPosition = g.queryPosition(i);
    rowLogSumExp = logSumExp[g.rowOffset(b, h, i)];
    rowDot = dots[g.rowOffset(b, h, i)];
    for (int64_t c = lane; c < dim; c += 32) {
      q[c] = widen(query[g.queryOffset(b, i, h) + c]);
      dOut[c] = widen(resultGrad[g.queryOffset(b, i, h) + c]);
    }
  }
  // A row that sees no key has no gradient.
  bool live = row && rowLogSumExp != -INFINITY;

  float dq[kColumnsPerLane] = {};
  for (int64_t j0 = 0; j0 < g.keySeq; j0 += kTile) {
    int64_t j = j0 + lane;
    int64_t keyPosition = j < g.keySeq ? g.keyPosition(j) : 0;
    bool seen = live && j < g.keySeq && g.visible(queryPosition, keyPosition);
    if (!loadKeyValueTiles(seen, g, key, value, b, kv, j0, keys, values))
      continue;
    float scoreGrad = 0;
    if (seen) {
      float slope;
      float score = g.score(g.scale * dot(q, keys + lane * padded, dim), h,
                            queryPosition, keyPosition, slope);
      float p = expf(score - rowLogSumExp);
      float pGrad = dot(dOut, values + lane * padded, dim);
      scoreGrad = p * (pGrad - rowDot) * slope * g.scale;
    }
    for (int jj = 0; jj < kTile; ++jj) {
      float s = __shfl_sync(kAllLanes, scoreGrad, jj);
      if (s == 0.0f)
        continue;
      for (int k = 0; k < kColumnsPerLane; ++k)
        if (int64_t c = lane + 32 * k; c < dim)
          dq[k] += s * keys[jj * padded + c];
    }
    __syncthreads();
  }
  if (!row)
    return;
  for (int k = 0; k < kColumnsPerLane; ++k)
    if (int64_t c = lane + 32 * k; c < dim)
      queryGrad[g.queryOffset(b, i, h) + c] = narrow<T>(dq[k]);
}

/// dk and dv for each key row, over the query tiles of every query head
/// of its group in head order. Grid: (key rows / kRowsPerBlock, kvHeads,
/// batch).
template <typename T>
__global__ void attentionGradKeyValue(AttentionGeometry g, const T *query,
                                      const T *key, const T *value,
                                      const T *resultGrad,
                                      const float *logSumExp, const float *dots,
                                      T *keyGrad, T *valueGrad) {
  extern __shared__ float shared[];
  int64_t dim = g.dim, padded = dim + 1;
  float *queries = shared, *grads = queries + kTile * padded,
        *keys = grads + kTile * padded, *values = keys + kRowsPerBlock * padded,
        *rowLogSumExps = values + kRowsPerBlock * padded,
        *rowDots = rowLogSumExps + kTile;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t b = blockIdx.z, kv = blockIdx.y;
  int64_t group = g.queryHeads / g.kvHeads;
  int64_t j = int64_t(blockIdx.x) * kRowsPerBlock + warp;
  bool row = j < g.keySeq;
  float *k = keys + warp * padded, *v = values + warp * padded;
  int64_t keyPosition = 0;
  if (row) {
    keyPosition = g.keyPosition(j);
    for (int64_t c = lane; c < dim; c += 32) {
      k[c] = widen(key[g.kvOffset(b, j, kv) + c]);
      v[c] = widen(value[g.kvOffset(b, j, kv) + c]);
    }
  }

  float dk[kColumnsPerLane] = {}, dv[kColumnsPerLane] = {};
  int64_t stride = g.queryHeads * dim;
  for (int64_t h = kv * group; h < (kv + 1) * group; ++h)
    for (int64_t i0 = 0; i0 < g.querySeq; i0 += kTile) {
      int64_t i = i0 + lane;
      int64_t queryPosition = i < g.querySeq ? g.queryPosition(i) : 0;
      bool seen =
          row && i < g.querySeq && g.visible(queryPosition, keyPosition);
      if (!__syncthreads_or(__any_sync(kAllLanes, seen)))
        continue;
      loadTile(queries, query + (b * g.querySeq) * stride + h * dim, i0,
               g.querySeq, stride, dim);
      loadTile(grads, resultGrad + (b * g.querySeq) * stride + h * dim, i0,
               g.querySeq, stride, dim);
      if (threadIdx.x < kTile) {
        int64_t r = i0 + threadIdx.x;
        rowLogSumExps[threadIdx.x] =
            r < g.querySeq ? logSumExp[g.rowOffset(b, h, r)] : -INFINITY;
        rowDots[threadIdx.x] = r < g.querySeq ? dots[g.rowOffset(b, h, r)] : 0;
      }
      __syncthreads();
      float p = 0, scoreGrad = 0;
      if (seen && rowLogSumExps[lane] != -INFINITY) {
        float slope;
        float score = g.score(g.scale * dot(queries + lane * padded, k, dim), h,
                              queryPosition, keyPosition, slope);
        p = expf(score - rowLogSumExps[lane]);
        float pGrad = dot(grads + lane * padded, v, dim);
        scoreGrad = p * (pGrad - rowDots[lane]) * slope * g.scale;
      }
      for (int ii = 0; ii < kTile; ++ii) {
        float pi = __shfl_sync(kAllLanes, p, ii);
        float si = __shfl_sync(kAllLanes, scoreGrad, ii);
        if (pi == 0.0f && si == 0.0f)
          continue;
        for (int e = 0; e < kColumnsPerLane; ++e)
          if (int64_t c = lane + 32 * e; c < dim) {
            dv[e] += pi * grads[ii * padded + c];
            dk[e] += si * queries[ii * padded + c];
          }
      }
      __syncthreads();
    }
  if (!row)
    return;
  for (int e = 0; e < kColumnsPerLane; ++e)
    if (int64_t c = lane + 32 * e; c < dim) {
      keyGrad[g.kvOffset(b, j, kv) + c] = narrow<T>(dk[e]);
      valueGrad[g.kvOffset(b, j, kv) + c] = narrow<T>(dv[e]);
    }
}

/// The sinks' gradient: for head blockIdx.x, -sum over the rows (b, i) of
/// exp(sink - lse) * D, each of kSinkThreads threads a strided share, then
/// the shares added in one fixed order.
constexpr int kSinkThreads = 256;

template <typename T>
__global__ void sinkGradKernel(AttentionGeometry g, const float *logSumExp,
                               const float *dots, T *sinksGrad) {
  __shared__ float shares[kSinkThreads];
  int64_t h = blockIdx.x, rows = g.batch * g.querySeq;
  float sink = g.sinks[h], sum = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kSinkThreads) {
    int64_t row = g.rowOffset(r / g.querySeq, h, r % g.querySeq);
    sum -= expf(sink - logSumExp[row]) * dots[row];
  }
  shares[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kSinkThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shares[threadIdx.x] += shares[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    sinksGrad[h] = narrow<T>(shares[0]);
}

/// attention_merge: the two normalized results weighted by their rows'
/// shares of the merged sum. One thread per [batch, seq, heads] row.
template <typename T>
__global__ void attentionMergeKernel(const T *a, const float *aSums,
                                     const T *other, const float *otherSums,
                                     T *out, float *outSums, int64_t batch,
                                     int64_t seq, int64_t heads, int64_t dim) {
  int64_t rows = batch * seq * heads;
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < rows;
       n += int64_t(gridDim.x) * blockDim.x) {
    int64_t h = n % heads, i = (n / heads) % seq, b = n / (heads * seq);
    int64_t r = (b * heads + h) * seq + i;
    float la = aSums[r], lb = otherSums[r];
    float max = fmaxf(la, lb);
    float wa = 0, wb = 0, merged = -INFINITY;
    if (max != -INFINITY) {
      float ea = expf(la - max), eb = expf(lb - max);
      float total = ea + eb;
      merged = max + logf(total);
      wa = ea / total;
      wb = eb / total;
    }
    outSums[r] = merged;
    for (int64_t d = 0; d < dim; ++d)
      out[n * dim + d] = narrow<T>(widen(a[n * dim + d]) * wa +
                                   widen(other[n * dim + d]) * wb);
  }
}

/// out[0, n) = in[0, n) widened to fp32.
template <typename T>
__global__ void widenKernel(const T *in, float *out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = widen(in[i]);
}

/// Shared memory of each kernel, in bytes.
int64_t forwardShared(int64_t dim) {
  return (2 * kTile + kRowsPerBlock) * (dim + 1) * sizeof(float);
}
int64_t queryGradShared(int64_t dim) {
  return (2 * kTile + 2 * kRowsPerBlock) * (dim + 1) * sizeof(float);
}
int64_t keyValueGradShared(int64_t dim) {
  return ((2 * kTile + 2 * kRowsPerBlock) * (dim + 1) + 2 * kTile) *
         sizeof(float);
}

/// Lets `kernel` use `bytes` of dynamic shared memory (past the default
/// 48 KiB where the device allows).
template <typename Kernel>
Status allowShared(Kernel kernel, int64_t bytes, const char *what) {
  if (bytes <= 48 * 1024)
    return Status::success();
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)),
      std::string("allowing ") + std::to_string(bytes) +
          " bytes of shared memory to " + what);
  return Status::success();
}

/// The geometry of an attention instruction whose queries are block
/// `queryBlock` and keys block `keyBlock` of a sequence of `length`.
AttentionGeometry geometryOf(const KernelArgs &args, int64_t queryFirst,
                             int64_t keyFirst, int64_t length) {
  const std::vector<int64_t> &qs = args.in(0).shape(), &ks = args.in(1).shape();
  AttentionGeometry g{};
  g.batch = qs[0];
  g.querySeq = qs[1];
  g.queryHeads = qs[2];
  g.dim = qs[3];
  g.keySeq = ks[1];
  g.kvHeads = ks[2];
  g.queryFirst = queryFirst;
  g.keyFirst = keyFirst;
  g.length = length;
  const AttentionParameters &parameters =
      parametersOf<AttentionParameters>(args);
  g.chunks = parameters.chunks;
  g.scale = static_cast<float>(parameters.scale);
  g.softcap = static_cast<float>(parameters.softcap);
  g.causal = parameters.causal;
  g.window = parameters.window;
  g.alibiSlopes = nullptr;
  g.sinks = nullptr;
  return g;
}

/// Floats of scratch headTerms needs: fp32 copies of the slopes and sinks.
int64_t headTermFloats(const KernelArgs &args) {
  const AttentionParameters &parameters =
      parametersOf<AttentionParameters>(args);
  int64_t heads = args.in(0).shape()[2];
  return (parameters.slopesOperand >= 0 ? heads : 0) +
         (parameters.sinksOperand >= 0 ? heads : 0);
}

/// Allocates `scratch` (null when empty): fp32 copies of the instruction's
/// ALiBi slopes and sinks (of element type T; `g` points at them, and they
/// are enqueued on `stream`), then `extra` floats for the caller at
/// scratch + headTermFloats(args). The caller frees it on the stream.
template <typename T>
Status withHeadTerms(const KernelArgs &args, AttentionGeometry &g,
                     int64_t extra, float *&scratch, cudaStream_t stream) {
  scratch = nullptr;
  int64_t floats = headTermFloats(args) + extra;
  if (floats == 0)
    return Status::success();
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void **>(&scratch),
                      floats * sizeof(float), stream),
      "allocating " + args.instruction.op + "'s scratch");
  const AttentionParameters &parameters =
      parametersOf<AttentionParameters>(args);
  float *copy = scratch;
  for (auto [operand, field] :
       {std::pair{parameters.slopesOperand, &g.alibiSlopes},
        std::pair{parameters.sinksOperand, &g.sinks}}) {
    if (operand < 0)
      continue;
    widenKernel<<<1, 256, 0, stream>>>(
        static_cast<const T *>(args.in(operand).raw()), copy, g.queryHeads);
    *field = copy;
    copy += g.queryHeads;
  }
  return Status::success();
}

Status checkGeometry(const AttentionGeometry &g, const std::string &op) {
  if (g.dim > kMaxDim)
    return Status::error("cuda: " + op + " with heads of " +
                         std::to_string(g.dim) + " (expected at most " +
                         std::to_string(kMaxDim) + ")");
  return Status::success();
}

dim3 queryGrid(const AttentionGeometry &g) {
  return dim3(
      static_cast<unsigned>((g.querySeq + kRowsPerBlock - 1) / kRowsPerBlock),
      static_cast<unsigned>(g.queryHeads), static_cast<unsigned>(g.batch));
}

/// Enqueues the forward: `out` ([batch, querySeq, queryHeads, dim] of R)
/// and, when not null, `logSumExp`.
template <typename T, typename R>
Status launchForward(const AttentionGeometry &g, const T *q, const T *k,
                     const T *v, R *out, float *logSumExp,
                     cudaStream_t stream) {
  int64_t bytes = forwardShared(g.dim);
  TRELLIS_RETURN_IF_ERROR(
      allowShared(attentionForward<T, R>, bytes, "attention"));
  attentionForward<T, R><<<queryGrid(g), kRowsPerBlock * 32, bytes, stream>>>(
      g, q, k, v, out, logSumExp);
  return Status::success();
}

/// Enqueues the backward from the forward's `result` (R) and
/// `logSumExp`; `dots` is scratch of one float per query row. With sinks,
/// their gradient goes to dSinks.
template <typename T, typename R>
Status launchBackward(const AttentionGeometry &g, const T *q, const T *k,
                      const T *v, const R *result, const float *logSumExp,
                      const T *resultGrad, float *dots, T *dq, T *dk, T *dv,
                      T *dSinks, cudaStream_t stream) {
  int64_t rows = g.batch * g.querySeq * g.queryHeads;
  LaunchGeometry warps = elementwiseGeometry(rows * 32);
  rowDots<T, R>
      <<<warps.blocks, warps.threads, 0, stream>>>(g, result, resultGrad, dots);
  int64_t bytes = queryGradShared(g.dim);
  TRELLIS_RETURN_IF_ERROR(
      allowShared(attentionGradQuery<T>, bytes, "attention_grad"));
  attentionGradQuery<T><<<queryGrid(g), kRowsPerBlock * 32, bytes, stream>>>(
      g, q, k, v, resultGrad, logSumExp, dots, dq);
  bytes = keyValueGradShared(g.dim);
  TRELLIS_RETURN_IF_ERROR(
      allowShared(attentionGradKeyValue<T>, bytes, "attention_grad"));
  dim3 keyGrid(
      static_cast<unsigned>((g.keySeq + kRowsPerBlock - 1) / kRowsPerBlock),
      static_cast<unsigned>(g.kvHeads), static_cast<unsigned>(g.batch));
  attentionGradKeyValue<T><<<keyGrid, kRowsPerBlock * 32, bytes, stream>>>(
      g, q, k, v, resultGrad, logSumExp, dots, dk, dv);
  if (g.sinks)
    sinkGradKernel<T>
        <<<static_cast<unsigned>(g.queryHeads), kSinkThreads, 0, stream>>>(
            g, logSumExp, dots, dSinks);
  return Status::success();
}

/// cuDNN's graphs for the instructions it covers (CudnnAttention.h);
/// null: the CUDA-core kernels run it.
StatusOr<std::unique_ptr<PreparedLaunch>>
prepareAttention(const KernelArgs &args, CudaContext &context) {
#ifdef TRELLIS_HAVE_CUDNN_FRONTEND
  std::string why;
  std::unique_ptr<PreparedLaunch> prepared =
      prepareCudnnAttention(args, context, why);
  // cuDNN absent or refusing a shape it should cover: said once per reason.
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (!why.empty() && said.insert(why).second)
    std::fprintf(stderr, "trellis: cuda: %s on CUDA cores: %s\n",
                 args.instruction.op.c_str(), why.c_str());
  return StatusOr<std::unique_ptr<PreparedLaunch>>(std::move(prepared));
#else
  (void)args;
  (void)context;
  return std::unique_ptr<PreparedLaunch>();
#endif
}

Status runAttention(const KernelArgs &args, CudaContext &context) {
  const std::string &op = args.instruction.op;
  bool gradient = rowOf(args).gradient;
#ifdef TRELLIS_HAVE_CUDNN_FRONTEND
  if (args.prepared && isCudnnAttention(args.prepared))
    return runCudnnAttention(*args.prepared, args, context);
#endif
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  int64_t querySeq = args.in(0).shape()[1], keySeq = args.in(1).shape()[1];
  // The queries sit at stored indices first ... of the keys' sequence.
  AttentionGeometry g = geometryOf(args, *position * querySeq, 0, keySeq);
  TRELLIS_RETURN_IF_ERROR(checkGeometry(g, op));
  if (args.in(0).size() == 0)
    return Status::success();
  cudaStream_t stream = context.stream;
  int64_t rows = g.batch * g.querySeq * g.queryHeads;
  int64_t terms = headTermFloats(args);
  TRELLIS_RETURN_IF_ERROR(onFloat(args.in(0).desc().dtype, [&](auto type) {
    using T = decltype(type);
    const T *q = static_cast<const T *>(args.in(0).raw()),
            *k = static_cast<const T *>(args.in(1).raw()),
            *v = static_cast<const T *>(args.in(2).raw());
    // The slopes' and sinks' fp32 copies; for the gradient, the forward's
    // fp32 result and log-sum-exp, then the row dots.
    float *scratch = nullptr;
    TRELLIS_RETURN_IF_ERROR(withHeadTerms<T>(
        args, g, gradient ? rows * g.dim + 2 * rows : 0, scratch, stream));
    auto launch = [&]() -> Status {
      if (!gradient)
        return launchForward(g, q, k, v, static_cast<T *>(args.out(0).raw()),
                             static_cast<float *>(nullptr), stream);
      float *result = scratch + terms, *logSumExp = result + rows * g.dim,
            *dots = logSumExp + rows;
      TRELLIS_RETURN_IF_ERROR(
          launchForward(g, q, k, v, result, logSumExp, stream));
      return launchBackward(
          g, q, k, v, static_cast<const float *>(result), logSumExp,
          static_cast<const T *>(args.in(3).raw()), dots,
          static_cast<T *>(args.out(0).raw()),
          static_cast<T *>(args.out(1).raw()),
          static_cast<T *>(args.out(2).raw()),
          g.sinks ? static_cast<T *>(args.out(3).raw()) : nullptr, stream);
    };
    Status status = launch();
    if (scratch)
      (void)cudaFreeAsync(scratch, stream);
    return status;
  }));
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
  return Status::success();
}

Status runRingAttention(const KernelArgs &args, CudaContext &context) {
  const std::string &op = args.instruction.op;
  const OpContract &row = rowOf(args);
  cudaStream_t stream = context.stream;
  if (row.memberAs<AttentionPiece>() == AttentionPiece::Merge) {
    const std::vector<int64_t> &shape = args.in(0).shape();
    int64_t rows = shape[0] * shape[1] * shape[2];
    if (rows == 0)
      return Status::success();
    LaunchGeometry grid = elementwiseGeometry(rows);
    TRELLIS_RETURN_IF_ERROR(onFloat(args.in(0).desc().dtype, [&](auto type) {
      using T = decltype(type);
      attentionMergeKernel<<<grid.blocks, grid.threads, 0, stream>>>(
          static_cast<const T *>(args.in(0).raw()),
          static_cast<const float *>(args.in(1).raw()),
          static_cast<const T *>(args.in(2).raw()),
          static_cast<const float *>(args.in(3).raw()),
          static_cast<T *>(args.out(0).raw()),
          static_cast<float *>(args.out(1).raw()), shape[0], shape[1], shape[2],
          shape[3]);
      return Status::success();
    }));
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
    return Status::success();
  }
  // This rank's queries against the key block `shift` places before it on
  // the ring.
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  StatusOr<int64_t> source = ringSourcePosition(args);
  if (!source.ok())
    return source.status();
  int64_t seq = args.in(0).shape()[1];
  AttentionGeometry g =
      geometryOf(args, *position * seq, *source * seq, seq * shardCount(args));
  TRELLIS_RETURN_IF_ERROR(checkGeometry(g, op));
  if (args.in(0).size() == 0)
    return Status::success();
  int64_t rows = g.batch * g.querySeq * g.queryHeads;
  int64_t terms = headTermFloats(args);
  TRELLIS_RETURN_IF_ERROR(onFloat(args.in(0).desc().dtype, [&](auto type) {
    using T = decltype(type);
    const T *q = static_cast<const T *>(args.in(0).raw()),
            *k = static_cast<const T *>(args.in(1).raw()),
            *v = static_cast<const T *>(args.in(2).raw());
    // The slopes' and sinks' fp32 copies; for the gradient, the row dots.
    float *scratch = nullptr;
    TRELLIS_RETURN_IF_ERROR(
        withHeadTerms<T>(args, g, row.gradient ? rows : 0, scratch, stream));
    Status status =
        !row.gradient
            ? launchForward(g, q, k, v, static_cast<T *>(args.out(0).raw()),
                            static_cast<float *>(args.out(1).raw()), stream)
            : launchBackward(
                  g, q, k, v, static_cast<const T *>(args.in(3).raw()),
                  static_cast<const float *>(args.in(4).raw()),
                  static_cast<const T *>(args.in(5).raw()), scratch + terms,
                  static_cast<T *>(args.out(0).raw()),
                  static_cast<T *>(args.out(1).raw()),
                  static_cast<T *>(args.out(2).raw()),
                  g.sinks ? static_cast<T *>(args.out(3).raw()) : nullptr,
                  stream);
    if (scratch)
      (void)cudaFreeAsync(scratch, stream);
    return status;
  }));
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching " + op);
  return Status::success();
}

} // namespace

void registerAttentionKernels(CudaKernelTable &table) {
  table.addMember(AttentionPiece::Whole, {runAttention, prepareAttention});
  table.addMember(AttentionPiece::Block, {runRingAttention});
  table.addMember(AttentionPiece::Merge, {runRingAttention});
}

} // namespace trellis::runtime::cuda
