//===- DenseAttention.cpp - Attention of short sequences, row by row ------===//
//
// For key sequences up to kDenseAttentionKeys: each head's whole score
// matrix at once (one sgemm for q k^T, a softmax per row over its visible
// keys, one sgemm for p v), which is as fast as the blocked kernels there
// or faster: the backward computes the probabilities' gradient from the
// probabilities themselves, without recomputing the forward's result. Heads
// split over the device's OpenMP threads (the backward by kv head). A piece of
// the queries (context parallelism) sits at its place in the keys' sequence;
// with `chunks` the causal mask compares the zigzag order's positions. A
// sliding `window` narrows the mask; a `softcap` bends the scores first;
// ALiBi's slopes add a distance penalty after it; a sink adds its logit
// to each row's denominator.
//
//===----------------------------------------------------------------------===//

#include "BlockedAttention.h"
#include "Gemm.h"
#include "SoftmaxRows.h"

#include "trellis/Common/SequenceChunks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace trellis::runtime::cpu {

namespace {

/// Queries [batch, seq, queryHeads, dim] at stored indices first + i of
/// the keys' [batch, keySeq, kvHeads, dim] (first > 0: a piece of the
/// queries, context parallelism).
struct AttentionShape {
  int64_t batch, seq, queryHeads, kvHeads, dim, keySeq, first;
  int queryStride() const { return static_cast<int>(queryHeads * dim); }
  int kvStride() const { return static_cast<int>(kvHeads * dim); }
  int64_t queryOffset(int64_t b, int64_t h) const {
    return b * seq * queryHeads * dim + h * dim;
  }
  int64_t kvOffset(int64_t b, int64_t h) const {
    return b * keySeq * kvHeads * dim + (h / (queryHeads / kvHeads)) * dim;
  }
};

/// Which keys each query sees: with the sequence in natural order, a
/// range (a prefix, cut to its last `window` positions); in zigzag order,
/// the keys whose positions the mask shows the query's.
struct KeyMask {
  AttentionMask mask;
  int64_t chunks = 0;
  std::vector<int64_t> queryPositions, keyPositions;

  KeyMask(const AttentionShape &s, AttentionMask mask, int64_t chunks)
      : mask(mask), chunks(chunks) {
    if (chunks > 1) {
      queryPositions = sequencePositions(s.first, s.seq, s.keySeq, chunks);
      keyPositions = sequencePositions(0, s.keySeq, s.keySeq, chunks);
    }
  }
  bool isRange() const { return !mask.causal || chunks <= 1; }
  /// The keys [begin, end) of query i (natural order).
  std::pair<int64_t, int64_t> range(const AttentionShape &s, int64_t i) const {
    return mask.range(s.first + i, 0, s.keySeq);
  }
  bool sees(int64_t i, int64_t j) const {
    return mask.sees(queryPositions[i], keyPositions[j]);
  }
  /// The position of query i and of key j.
  int64_t queryPosition(const AttentionShape &s, int64_t i) const {
    return chunks > 1 ? queryPositions[i] : s.first + i;
  }
  int64_t keyPosition(int64_t j) const {
    return chunks > 1 ? keyPositions[j] : j;
  }
};

/// A head's score terms beyond scale q k^T: ALiBi's slope and the sink's
/// logit, where the instruction has them.
struct HeadTerms {
  float alibiSlope = 0;
  bool alibi = false;
  bool sink = false;
  float sinkLogit = 0;

  static HeadTerms of(const AttentionTensors &t, int64_t h) {
    HeadTerms terms;
    if (t.alibiSlopes) {
      terms.alibi = true;
      terms.alibiSlope = t.alibiSlopes[h];
    }
    if (t.sinks) {
      terms.sink = true;
      terms.sinkLogit = t.sinks[h];
    }
    return terms;
  }
};

/// Softmax over the keys j of `row` that `shown(j)` is true for (the others
/// zero), with the head's sink in the denominator; returns the sink's share
/// (0 without one).
template <typename Shown>
float softmaxShown(float *row, int64_t keys, const HeadTerms &terms,
                   Shown shown) {
  float max =
      terms.sink ? terms.sinkLogit : -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < keys; ++j)
    if (shown(j))
      max = std::max(max, row[j]);
  double sum = terms.sink ? std::exp(double(terms.sinkLogit) - max) : 0.0;
  double sinkTerm = sum;
  for (int64_t j = 0; j < keys; ++j)
    sum += (row[j] = shown(j) ? std::exp(row[j] - max) : 0.0f);
  if (sum == 0)
    return 0;
  float inverse = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < keys; ++j)
    row[j] *= inverse;
  return static_cast<float>(sinkTerm / sum);
}

/// probabilities = softmax(mask(alibi(softcap(scale * q k^T)))), row by
/// row ([seq, keySeq]), a sink in each denominator when the head has one;
/// slopes (when not null) the soft-cap's derivative per score, sinkShares
/// (when not null) each row's sink probability. False when the scores'
/// product failed.
bool attentionProbabilities(const AttentionShape &s, const float *q,
                            const float *k, float scale, float softcap,
                            const HeadTerms &terms, const KeyMask &mask,
                            float *probabilities, float *slopes,
                            float *sinkShares) {
  if (!gemm(false, true, s.seq, s.keySeq, s.dim, scale, q, s.queryStride(), k,
            s.kvStride(), 0.0f, probabilities, s.keySeq))
    return false;
  if (softcap > 0)
    softCapRow(probabilities, s.seq * s.keySeq, softcap, slopes);
  for (int64_t i = 0; i < s.seq; ++i) {
    float *row = probabilities + i * s.keySeq;
    float sinkShare = 0;
    if (terms.alibi) {
      int64_t query = mask.queryPosition(s, i);
      for (int64_t j = 0; j < s.keySeq; ++j)
        row[j] +=
            terms.alibiSlope * static_cast<float>(mask.keyPosition(j) - query);
    }
    if (mask.isRange()) {
      auto [begin, end] = mask.range(s, i);
      if (terms.sink)
        sinkShare = softmaxShown(row, s.keySeq, terms, [&](int64_t j) {
          return j >= begin && j < end;
        });
      else
        softmaxRow(row + begin, row + begin, end - begin);
      std::fill(row, row + begin, 0.0f);
      std::fill(row + end, row + s.keySeq, 0.0f);
    } else {
      sinkShare = softmaxShown(row, s.keySeq, terms,
                               [&](int64_t j) { return mask.sees(i, j); });
    }
    if (sinkShares)
      sinkShares[i] = sinkShare;
  }
  return true;
}

} // namespace

Status runDenseAttention(const KernelArgs &args) {
  const std::vector<int64_t> &qs = args.in(0).shape(), &ks = args.in(1).shape();
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  AttentionShape s{qs[0], qs[1], qs[2], ks[2], qs[3], ks[1], *position * qs[1]};
  const AttentionParameters &parameters =
      parametersOf<AttentionParameters>(args);
  float scale = static_cast<float>(parameters.scale);
  float softcap = static_cast<float>(parameters.softcap);
  KeyMask mask(s, AttentionMask::of(args), parameters.chunks);
  AttentionTensors tensors = attentionTensors(args);
  const float *q = args.in(0).f32(), *k = args.in(1).f32(),
              *v = args.in(2).f32();
  int64_t seq = s.seq, dim = s.dim, keys = s.keySeq;
  // Set by any thread whose matrix product failed.
  std::atomic<bool> failed{false};
  auto check = [&](bool ok) {
    if (!ok)
      failed.store(true, std::memory_order_relaxed);
  };
  auto status = [&] {
    return failed.load() ? gemmFailure(args.instruction.op)
                         : Status::success();
  };

  // Heads over the device's OpenMP threads (BLAS runs single-threaded
  // inside); each thread has its own scratch.
  if (!rowOf(args).gradient) {
    float *out = args.out(0).f32();
#pragma omp parallel
    {
      std::vector<float> probabilities(s.seq * s.keySeq);
#pragma omp for collapse(2) schedule(static)
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < s.queryHeads; ++h) {
          check(attentionProbabilities(s, q + s.queryOffset(b, h),
                                       k + s.kvOffset(b, h), scale, softcap,
                                       HeadTerms::of(tensors, h), mask,
                                       probabilities.data(), nullptr, nullptr));
          check(gemm(false, false, seq, dim, keys, 1.0f, probabilities.data(),
                     keys, v + s.kvOffset(b, h), s.kvStride(), 0.0f,
                     out + s.queryOffset(b, h), s.queryStride()));
        }
    }
    return status();
  }

  const float *dOut = args.in(3).f32();
  float *dq = args.out(0).f32(), *dk = args.out(1).f32(),
        *dv = args.out(2).f32();
  std::fill(dk, dk + args.out(1).size(), 0.0f);
  std::fill(dv, dv + args.out(2).size(), 0.0f);
  // The sinks' gradient per (batch, head), summed over batch in order
  // afterwards: -sum over rows of p(sink) * rowsum(dP * P).
  float *dSinks = tensors.sinks ? args.out(3).f32() : nullptr;
  std::vector<double> sinkGrads(dSinks ? s.batch * s.queryHeads : 0, 0.0);
  // A kv head's gradients sum over its query heads: a thread takes whole
  // kv heads and adds their query heads in order (thread-count
  // independent).
  int64_t group = s.queryHeads / s.kvHeads;
#pragma omp parallel
  {
    std::vector<float> probabilities(s.seq * s.keySeq),
        dScores(s.seq * s.keySeq), slopes(softcap > 0 ? s.seq * s.keySeq : 0),
        sinkShares(s.seq);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t kv = 0; kv < s.kvHeads; ++kv)
        for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
      int64_t qo = s.queryOffset(b, h), ko = s.kvOffset(b, h);
      float *p = probabilities.data(), *ds = dScores.data();
      check(attentionProbabilities(s, q + qo, k + ko, scale, softcap,
                                   HeadTerms::of(tensors, h), mask, p,
                                   slopes.data(), sinkShares.data()));
      // dV += P^T dO
      check(gemm(true, false, keys, dim, seq, 1.0f, p, keys, dOut + qo,
                 s.queryStride(), 1.0f, dv + ko, s.kvStride()));
      // dP = dO V^T
      check(gemm(false, true, seq, keys, dim, 1.0f, dOut + qo,
                 s.queryStride(), v + ko, s.kvStride(), 0.0f, ds, keys));
      // dS = P * (dP - rowsum(dP * P)), times the soft-cap's slope
      double sinkGrad = 0;
      for (int64_t i = 0; i < s.seq; ++i) {
        float *pRow = p + i * s.keySeq, *dRow = ds + i * s.keySeq;
        float dot = static_cast<float>(rowDot(pRow, dRow, s.keySeq));
        sinkGrad -= double(sinkShares[i]) * dot;
        for (int64_t j = 0; j < s.keySeq; ++j)
          dRow[j] = pRow[j] * (dRow[j] - dot);
        if (softcap > 0) {
          const float *slope = slopes.data() + i * s.keySeq;
          for (int64_t j = 0; j < s.keySeq; ++j)
            dRow[j] *= slope[j];
        }
      }
      if (dSinks)
        sinkGrads[b * s.queryHeads + h] = sinkGrad;
      // dQ = scale dS K;  dK += scale dS^T Q
      check(gemm(false, false, seq, dim, keys, scale, ds, keys, k + ko,
                 s.kvStride(), 0.0f, dq + qo, s.queryStride()));
      check(gemm(true, false, keys, dim, seq, scale, ds, keys, q + qo,
                 s.queryStride(), 1.0f, dk + ko, s.kvStride()));
        }
  }
  for (int64_t h = 0; dSinks && h < s.queryHeads; ++h) {
    double sum = 0;
    for (int64_t b = 0; b < s.batch; ++b)
      sum += sinkGrads[b * s.queryHeads + h];
    dSinks[h] = static_cast<float>(sum);
  }
  return status();
}

} // namespace trellis::runtime::cpu
