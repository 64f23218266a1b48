//===- RingAttention.cpp - Ring attention's block kernels -----------------===//
//
// attention_block: this rank's queries against the key block of the rank
// `shift` places before it on the ring, as a normalized result and the
// rows' log-sum-exp; attention_merge combines two such results exactly;
// attention_block_grad is the block's share of the gradients, from the
// whole attention's result and log-sum-exp (FlashAttention-2's backward).
//
// The causal mask works on runs of consecutive positions: a zigzag block
// has two, and a pair of runs is empty (every key after every query:
// skipped), full, or diagonal (masked per element). That is where the
// zigzag order's balance comes from: every rank computes the same number
// of non-empty pairs.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace trellis::runtime::cpu {

namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

/// Queries [batch, seq, queryHeads, dim], keys and values [batch, seq,
/// kvHeads, dim], row log-sum-exps [batch, queryHeads, seq].
struct BlockShape {
  int64_t batch, seq, queryHeads, kvHeads, dim;
  int queryStride() const { return static_cast<int>(queryHeads * dim); }
  int kvStride() const { return static_cast<int>(kvHeads * dim); }
  int64_t queryOffset(int64_t b, int64_t h, int64_t row) const {
    return ((b * seq + row) * queryHeads + h) * dim;
  }
  int64_t kvOffset(int64_t b, int64_t h, int64_t row) const {
    return ((b * seq + row) * kvHeads + h / (queryHeads / kvHeads)) * dim;
  }
  int64_t rowOffset(int64_t b, int64_t h) const {
    return (b * queryHeads + h) * seq;
  }
};

enum class Visibility { None, All, Diagonal };

/// Which keys of run `keys` the queries of run `queries` see.
Visibility visibility(const PositionRun &queries, const PositionRun &keys,
                      bool causal) {
  if (!causal)
    return Visibility::All;
  if (keys.position > queries.position + queries.count - 1)
    return Visibility::None;
  if (keys.position + keys.count - 1 <= queries.position)
    return Visibility::All;
  return Visibility::Diagonal;
}

/// The positions of the queries' and the keys' blocks.
struct BlockPositions {
  std::vector<PositionRun> queries, keys;
};

StatusOr<BlockPositions> blockPositions(const KernelArgs &args, int64_t seq) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  int64_t ranks = shardCount(args);
  int64_t shift = args.instruction.integer("shift");
  int64_t source = ((*position - shift) % ranks + ranks) % ranks;
  int64_t chunks = args.instruction.integer("chunks");
  int64_t length = seq * ranks;
  return BlockPositions{
      positionRuns(sequencePositions(*position * seq, seq, length, chunks)),
      positionRuns(sequencePositions(source * seq, seq, length, chunks))};
}

/// scores[i, j] = scale * q_i . k_j for the rows of `queries` and
/// `keys`, masked to -inf where a diagonal pair hides the key.
void blockScores(const BlockShape &s, const float *q, const float *k,
                 float scale, const PositionRun &queries,
                 const PositionRun &keys, Visibility seen, float *scores) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
              static_cast<int>(queries.count), static_cast<int>(keys.count),
              static_cast<int>(s.dim), scale, q, s.queryStride(), k,
              s.kvStride(), 0.0f, scores, static_cast<int>(keys.count));
  if (seen != Visibility::Diagonal)
    return;
  for (int64_t i = 0; i < queries.count; ++i)
    for (int64_t j = 0; j < keys.count; ++j)
      if (keys.position + j > queries.position + i)
        scores[i * keys.count + j] = kMinusInfinity;
}

Status attentionBlock(const KernelArgs &args, const BlockShape &s,
                      const BlockPositions &runs) {
  float scale = static_cast<float>(args.instruction.real("scale"));
  bool causal = args.instruction.flag("causal", true);
  const float *q = args.in(0).f32(), *k = args.in(1).f32(),
              *v = args.in(2).f32();
  float *out = args.out(0).f32(), *logSumExp = args.out(1).f32();
  std::fill(out, out + args.out(0).size(), 0.0f);
  std::vector<float> scores;
  std::vector<float> maxima;
  std::vector<double> sums;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.queryHeads; ++h)
      for (const PositionRun &queries : runs.queries) {
        // Online softmax over the key runs: running maxima and sums, the
        // result rows scaled along.
        maxima.assign(queries.count, kMinusInfinity);
        sums.assign(queries.count, 0.0);
        float *outRows = out + s.queryOffset(b, h, queries.begin);
        for (const PositionRun &keys : runs.keys) {
          Visibility seen = visibility(queries, keys, causal);
          if (seen == Visibility::None)
            continue;
          scores.resize(queries.count * keys.count);
          blockScores(s, q + s.queryOffset(b, h, queries.begin),
                      k + s.kvOffset(b, h, keys.begin), scale, queries, keys,
                      seen, scores.data());
          for (int64_t i = 0; i < queries.count; ++i) {
            float *row = scores.data() + i * keys.count;
            float blockMax = *std::max_element(row, row + keys.count);
            float max = std::max(maxima[i], blockMax);
            if (max == kMinusInfinity) {
              std::fill(row, row + keys.count, 0.0f);
              continue;
            }
            float rescale =
                maxima[i] == kMinusInfinity ? 0.0f : std::exp(maxima[i] - max);
            double sum = 0;
            for (int64_t j = 0; j < keys.count; ++j)
              sum += (row[j] = std::exp(row[j] - max));
            sums[i] = sums[i] * rescale + sum;
            maxima[i] = max;
            float *outRow = outRows + i * s.queryStride();
            for (int64_t d = 0; d < s.dim; ++d)
              outRow[d] *= rescale;
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                      static_cast<int>(queries.count),
                      static_cast<int>(s.dim), static_cast<int>(keys.count),
                      1.0f, scores.data(), static_cast<int>(keys.count),
                      v + s.kvOffset(b, h, keys.begin), s.kvStride(), 1.0f,
                      outRows, s.queryStride());
        }
        float *rowSums = logSumExp + s.rowOffset(b, h) + queries.begin;
        for (int64_t i = 0; i < queries.count; ++i) {
          if (sums[i] == 0) {
            rowSums[i] = kMinusInfinity;
            continue;
          }
          float inverse = static_cast<float>(1.0 / sums[i]);
          float *outRow = outRows + i * s.queryStride();
          for (int64_t d = 0; d < s.dim; ++d)
            outRow[d] *= inverse;
          rowSums[i] = maxima[i] + static_cast<float>(std::log(sums[i]));
        }
      }
  return Status::success();
}

Status attentionMerge(const KernelArgs &args) {
  const std::vector<int64_t> &shape = args.in(0).shape();
  int64_t batch = shape[0], seq = shape[1], heads = shape[2], dim = shape[3];
  const float *a = args.in(0).f32(), *aSums = args.in(1).f32(),
              *other = args.in(2).f32(), *otherSums = args.in(3).f32();
  float *out = args.out(0).f32(), *outSums = args.out(1).f32();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        int64_t r = (b * heads + h) * seq + i;
        float la = aSums[r], lb = otherSums[r];
        float max = std::max(la, lb);
        float wa = 0, wb = 0, merged = kMinusInfinity;
        if (max != kMinusInfinity) {
          float ea = std::exp(la - max), eb = std::exp(lb - max);
          float total = ea + eb;
          merged = max + std::log(total);
          wa = ea / total;
          wb = eb / total;
        }
        outSums[r] = merged;
        int64_t o = ((b * seq + i) * heads + h) * dim;
        for (int64_t d = 0; d < dim; ++d)
          out[o + d] = a[o + d] * wa + other[o + d] * wb;
      }
  return Status::success();
}

Status attentionBlockGrad(const KernelArgs &args, const BlockShape &s,
                          const BlockPositions &runs) {
  float scale = static_cast<float>(args.instruction.real("scale"));
  bool causal = args.instruction.flag("causal", true);
  const float *q = args.in(0).f32(), *k = args.in(1).f32(),
              *v = args.in(2).f32(), *result = args.in(3).f32(),
              *logSumExp = args.in(4).f32(), *dOut = args.in(5).f32();
  float *dq = args.out(0).f32(), *dk = args.out(1).f32(),
        *dv = args.out(2).f32();
  std::fill(dq, dq + args.out(0).size(), 0.0f);
  std::fill(dk, dk + args.out(1).size(), 0.0f);
  std::fill(dv, dv + args.out(2).size(), 0.0f);
  std::vector<float> p, dp, rowDots(s.seq);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.queryHeads; ++h) {
      // rowsum(dO * O): the softmax's gradient term, of the whole result.
      for (int64_t i = 0; i < s.seq; ++i) {
        const float *o = result + s.queryOffset(b, h, i),
                    *g = dOut + s.queryOffset(b, h, i);
        double dot = 0;
        for (int64_t d = 0; d < s.dim; ++d)
          dot += double(o[d]) * g[d];
        rowDots[i] = static_cast<float>(dot);
      }
      const float *rowSums = logSumExp + s.rowOffset(b, h);
      for (const PositionRun &queries : runs.queries)
        for (const PositionRun &keys : runs.keys) {
          Visibility seen = visibility(queries, keys, causal);
          if (seen == Visibility::None)
            continue;
          int qn = static_cast<int>(queries.count),
              kn = static_cast<int>(keys.count), dim = static_cast<int>(s.dim);
          int64_t qo = s.queryOffset(b, h, queries.begin),
                  ko = s.kvOffset(b, h, keys.begin);
          p.resize(queries.count * keys.count);
          dp.resize(queries.count * keys.count);
          blockScores(s, q + qo, k + ko, scale, queries, keys, seen, p.data());
          // P = exp(scores - lse): the block's share of the probabilities.
          for (int64_t i = 0; i < queries.count; ++i) {
            float lse = rowSums[queries.begin + i];
            float *row = p.data() + i * keys.count;
            for (int64_t j = 0; j < keys.count; ++j)
              row[j] = lse == kMinusInfinity ? 0.0f : std::exp(row[j] - lse);
          }
          // dV += P^T dO
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, dim, qn,
                      1.0f, p.data(), kn, dOut + qo, s.queryStride(), 1.0f,
                      dv + ko, s.kvStride());
          // dP = dO V^T;  dS = P * (dP - rowsum(dO * O))
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, qn, kn, dim,
                      1.0f, dOut + qo, s.queryStride(), v + ko, s.kvStride(),
                      0.0f, dp.data(), kn);
          for (int64_t i = 0; i < queries.count; ++i) {
            float dot = rowDots[queries.begin + i];
            float *pRow = p.data() + i * keys.count,
                  *dRow = dp.data() + i * keys.count;
            for (int64_t j = 0; j < keys.count; ++j)
              dRow[j] = pRow[j] * (dRow[j] - dot);
          }
          // dQ += scale dS K;  dK += scale dS^T Q
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, qn, dim, kn,
                      scale, dp.data(), kn, k + ko, s.kvStride(), 1.0f,
                      dq + qo, s.queryStride());
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, dim, qn,
                      scale, dp.data(), kn, q + qo, s.queryStride(), 1.0f,
                      dk + ko, s.kvStride());
        }
    }
  return Status::success();
}

} // namespace

Status runRingAttention(const KernelArgs &args) {
  if (args.instruction.op == "attention_merge")
    return attentionMerge(args);
  const std::vector<int64_t> &qs = args.in(0).shape(),
                             &ks = args.in(1).shape();
  BlockShape s{qs[0], qs[1], qs[2], ks[2], qs[3]};
  StatusOr<BlockPositions> runs = blockPositions(args, s.seq);
  if (!runs.ok())
    return runs.status();
  if (args.instruction.op == "attention_block")
    return attentionBlock(args, s, *runs);
  return attentionBlockGrad(args, s, *runs);
}

} // namespace trellis::runtime::cpu
