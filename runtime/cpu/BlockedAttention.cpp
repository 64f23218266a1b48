//===- BlockedAttention.cpp - Attention over tiles of positions -----------===//

#include "BlockedAttention.h"

#include "Gemm.h"
#include "SoftmaxRows.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace trellis::runtime::cpu {

namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

enum class Visibility { None, All, Partial };

/// Which keys of run `keys` the queries of run `queries` see: none, all,
/// or a range per query (the causal diagonal, a sliding window's edge).
Visibility visibility(const PositionRun &queries, const PositionRun &keys,
                      const AttentionMask &mask) {
  if (!mask.causal)
    return Visibility::All;
  int64_t firstQuery = queries.position,
          lastQuery = queries.position + queries.count - 1;
  int64_t firstKey = keys.position, lastKey = keys.position + keys.count - 1;
  if (firstKey > lastQuery)
    return Visibility::None;
  if (mask.window > 0 && lastKey <= firstQuery - mask.window)
    return Visibility::None;
  bool causalWhole = lastKey <= firstQuery;
  bool windowWhole = mask.window <= 0 || firstKey > lastQuery - mask.window;
  return causalWhole && windowWhole ? Visibility::All : Visibility::Partial;
}

/// The keys [begin, end) of a tile that one query row sees: positions run
/// consecutively within a tile, so they are a range.
struct KeyRange {
  int64_t begin, end;
  int64_t count() const { return end - begin; }
};

KeyRange visibleKeys(const PositionRun &queries, const PositionRun &keys,
                     Visibility seen, const AttentionMask &mask, int64_t i) {
  if (seen != Visibility::Partial)
    return {0, keys.count};
  auto [begin, end] =
      mask.range(queries.position + i, keys.position, keys.count);
  return {begin, end};
}

/// Zeroes row[0, keys) outside `range`.
void clearOutside(float *row, int64_t keys, KeyRange range) {
  std::fill(row, row + range.begin, 0.0f);
  std::fill(row + range.end, row + keys, 0.0f);
}

/// Set by any thread whose matrix product failed; the kernel reports it
/// once its threads are done.
using GemmFailure = std::atomic<bool>;

void check(bool ok, GemmFailure &failure) {
  if (!ok)
    failure.store(true, std::memory_order_relaxed);
}

Status statusOf(const GemmFailure &failure, const char *op) {
  return failure.load() ? gemmFailure(op) : Status::success();
}

/// scores[i, j] = scale * q_i . k_j for the rows of `queries` and `keys`.
void tileScores(const BlockShape &s, const float *q, const float *k,
                float scale, const PositionRun &queries,
                const PositionRun &keys, float *scores,
                GemmFailure &failure) {
  check(gemm(false, true, queries.count, keys.count, s.dim, scale, q,
             s.queryStride(), k, s.kvStride(), 0.0f, scores, keys.count),
        failure);
}

/// One head's forward over one tile of queries: online softmax over the
/// key tiles, the result rows rescaled as the maxima grow.
void forwardTile(const BlockShape &s, const AttentionRuns &runs,
                 const AttentionTensors &t, int64_t b, int64_t h,
                 const PositionRun &queries, float *out, float *logSumExp,
                 std::vector<float> &scores, std::vector<float> &maxima,
                 std::vector<double> &sums, GemmFailure &failure) {
  // A sink is a key of score sinks[h] and value zero: the rows start with
  // it in their sum.
  maxima.assign(queries.count, t.sinks ? t.sinks[h] : kMinusInfinity);
  sums.assign(queries.count, t.sinks ? 1.0 : 0.0);
  float *outRows = out + s.queryOffset(b, h, queries.begin);
  for (int64_t i = 0; i < queries.count; ++i)
    std::fill(outRows + i * s.queryStride(),
              outRows + i * s.queryStride() + s.dim, 0.0f);
  for (const PositionRun &keys : runs.keys) {
    Visibility seen = visibility(queries, keys, t.mask);
    if (seen == Visibility::None)
      continue;
    scores.resize(queries.count * keys.count);
    tileScores(s, t.query + s.queryOffset(b, h, queries.begin),
               t.key + s.kvOffset(b, h, keys.begin), t.scale, queries, keys,
               scores.data(), failure);
    for (int64_t i = 0; i < queries.count; ++i) {
      float *row = scores.data() + i * keys.count;
      KeyRange visible = visibleKeys(queries, keys, seen, t.mask, i);
      clearOutside(row, keys.count, visible);
      if (visible.count() == 0)
        continue;
      float *shown = row + visible.begin;
      if (t.softcap > 0)
        softCapRow(shown, visible.count(), t.softcap, nullptr);
      if (t.alibiSlopes)
        addAlibiRow(shown, visible.count(), t.alibiSlopes[h],
                    keys.position + visible.begin - (queries.position + i));
      float max = std::max(maxima[i], rowMax(shown, visible.count()));
      float rescale =
          maxima[i] == kMinusInfinity ? 0.0f : std::exp(maxima[i] - max);
      double sum = expShifted(shown, shown, visible.count(), max);
      sums[i] = sums[i] * rescale + sum;
      maxima[i] = max;
      float *outRow = outRows + i * s.queryStride();
      for (int64_t d = 0; d < s.dim; ++d)
        outRow[d] *= rescale;
    }
    check(gemm(false, false, queries.count, s.dim, keys.count, 1.0f,
               scores.data(), keys.count,
               t.value + s.kvOffset(b, h, keys.begin), s.kvStride(), 1.0f,
               outRows, s.queryStride()),
          failure);
  }
  for (int64_t i = 0; i < queries.count; ++i) {
    float *outRow = outRows + i * s.queryStride();
    float total = kMinusInfinity;
    if (sums[i] > 0) {
      float inverse = static_cast<float>(1.0 / sums[i]);
      for (int64_t d = 0; d < s.dim; ++d)
        outRow[d] *= inverse;
      total = maxima[i] + static_cast<float>(std::log(sums[i]));
    }
    if (logSumExp)
      logSumExp[s.rowOffset(b, h) + queries.begin + i] = total;
  }
}

} // namespace

std::vector<PositionRun> tiled(const std::vector<PositionRun> &runs,
                               int64_t tile) {
  std::vector<PositionRun> tiles;
  for (const PositionRun &run : runs)
    for (int64_t start = 0; start < run.count; start += tile)
      tiles.push_back({run.begin + start, std::min(tile, run.count - start),
                       run.position + start});
  return tiles;
}

Status blockedAttention(const BlockShape &s, const AttentionRuns &runs,
                        const AttentionTensors &t, float *out,
                        float *logSumExp) {
  int64_t queryTiles = runs.queries.size();
  GemmFailure failure{false};
#pragma omp parallel
  {
    std::vector<float> scores, maxima;
    std::vector<double> sums;
#pragma omp for collapse(3) schedule(static)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.queryHeads; ++h)
        for (int64_t tile = 0; tile < queryTiles; ++tile)
          forwardTile(s, runs, t, b, h, runs.queries[tile], out, logSumExp,
                      scores, maxima, sums, failure);
  }
  return statusOf(failure, "attention");
}

Status blockedAttentionGrad(const BlockShape &s, const AttentionRuns &runs,
                            const AttentionTensors &t, const float *result,
                            const float *logSumExp, const float *resultGrad,
                            float *dq, float *dk, float *dv, float *dSinks) {
  GemmFailure failure{false};
  // The sinks' gradient per (batch, head), summed over batch in order
  // after the threads are done: -sum over rows of p(sink) * rowsum(dO * O).
  std::vector<double> sinkGrads(dSinks ? s.batch * s.queryHeads : 0, 0.0);
  int64_t queryElements = s.batch * s.querySeq * s.queryHeads * s.dim;
  int64_t keyElements = s.batch * s.keySeq * s.kvHeads * s.dim;
  std::fill(dq, dq + queryElements, 0.0f);
  std::fill(dk, dk + keyElements, 0.0f);
  std::fill(dv, dv + keyElements, 0.0f);
  // A kv head's gradients sum over its query heads: a thread takes whole
  // kv heads and adds their query heads, tiles and key tiles in order.
#pragma omp parallel
  {
    std::vector<float> p, dp, slopes, rowDots(s.querySeq);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t kv = 0; kv < s.kvHeads; ++kv)
        for (int64_t h = kv * s.group(); h < (kv + 1) * s.group(); ++h) {
          // rowsum(dO * O): the softmax's gradient term, of the whole
          // result.
          for (int64_t i = 0; i < s.querySeq; ++i) {
            const float *o = result + s.queryOffset(b, h, i),
                        *g = resultGrad + s.queryOffset(b, h, i);
            rowDots[i] = static_cast<float>(rowDot(o, g, s.dim));
          }
          const float *rowSums = logSumExp + s.rowOffset(b, h);
          if (dSinks) {
            double sum = 0;
            for (int64_t i = 0; i < s.querySeq; ++i)
              sum += std::exp(double(t.sinks[h]) - rowSums[i]) * rowDots[i];
            sinkGrads[b * s.queryHeads + h] = -sum;
          }
          for (const PositionRun &queries : runs.queries)
            for (const PositionRun &keys : runs.keys) {
              Visibility seen = visibility(queries, keys, t.mask);
              if (seen == Visibility::None)
                continue;
              int64_t qn = queries.count, kn = keys.count, dim = s.dim;
              int64_t qo = s.queryOffset(b, h, queries.begin),
                      ko = s.kvOffset(b, h, keys.begin);
              p.resize(queries.count * keys.count);
              dp.resize(queries.count * keys.count);
              tileScores(s, t.query + qo, t.key + ko, t.scale, queries, keys,
                         p.data(), failure);
              // Soft-capped scores and their slopes (the cap's
              // derivative, which the scores' gradient takes on).
              if (t.softcap > 0) {
                slopes.resize(queries.count * keys.count);
                softCapRow(p.data(), qn * kn, t.softcap, slopes.data());
              }
              // P = exp(scores - lse): the tile's probabilities.
              for (int64_t i = 0; i < queries.count; ++i) {
                float lse = rowSums[queries.begin + i];
                float *row = p.data() + i * keys.count;
                KeyRange visible =
                    lse == kMinusInfinity
                        ? KeyRange{0, 0}
                        : visibleKeys(queries, keys, seen, t.mask, i);
                if (t.alibiSlopes)
                  addAlibiRow(
                      row + visible.begin, visible.count(), t.alibiSlopes[h],
                      keys.position + visible.begin - (queries.position + i));
                expShifted(row + visible.begin, row + visible.begin,
                           visible.count(), lse);
                clearOutside(row, keys.count, visible);
              }
              // dV += P^T dO
              check(gemm(true, false, kn, dim, qn, 1.0f, p.data(), kn,
                         resultGrad + qo, s.queryStride(), 1.0f, dv + ko,
                         s.kvStride()),
                    failure);
              // dP = dO V^T;  dS = P * (dP - rowsum(dO * O)), times the
              // soft-cap's slope
              check(gemm(false, true, qn, kn, dim, 1.0f, resultGrad + qo,
                         s.queryStride(), t.value + ko, s.kvStride(), 0.0f,
                         dp.data(), kn),
                    failure);
              for (int64_t i = 0; i < queries.count; ++i) {
                float dot = rowDots[queries.begin + i];
                float *pRow = p.data() + i * keys.count,
                      *dRow = dp.data() + i * keys.count;
                for (int64_t j = 0; j < keys.count; ++j)
                  dRow[j] = pRow[j] * (dRow[j] - dot);
                if (t.softcap > 0) {
                  const float *slope = slopes.data() + i * keys.count;
                  for (int64_t j = 0; j < keys.count; ++j)
                    dRow[j] *= slope[j];
                }
              }
              // dQ += scale dS K;  dK += scale dS^T Q
              check(gemm(false, false, qn, dim, kn, t.scale, dp.data(), kn,
                         t.key + ko, s.kvStride(), 1.0f, dq + qo,
                         s.queryStride()),
                    failure);
              check(gemm(true, false, kn, dim, qn, t.scale, dp.data(), kn,
                         t.query + qo, s.queryStride(), 1.0f, dk + ko,
                         s.kvStride()),
                    failure);
            }
        }
  }
  for (int64_t h = 0; dSinks && h < s.queryHeads; ++h) {
    double sum = 0;
    for (int64_t b = 0; b < s.batch; ++b)
      sum += sinkGrads[b * s.queryHeads + h];
    dSinks[h] = static_cast<float>(sum);
  }
  return statusOf(failure, "attention_grad");
}

} // namespace trellis::runtime::cpu
