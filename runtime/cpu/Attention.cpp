//===- Attention.cpp - Scaled dot-product attention and its gradient ------===//
//
// Layout [batch, seq, heads, dim]; every head is a strided matrix, so the
// products go straight to sgemm with leading dimension heads * dim. Query
// head h reads key/value head h / (query heads / kv heads). The backward
// pass recomputes the probabilities of one head at a time (S x S floats).
// A piece of the queries (context parallelism: split over the instruction's
// axes) sits at its place in the keys' sequence.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace trellis::runtime::cpu {

namespace {

/// Queries [batch, seq, queryHeads, dim] at positions first + i of the
/// keys' [batch, keySeq, kvHeads, dim] (first > 0: a piece of the queries,
/// context parallelism).
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

/// probabilities = softmax(scale * q k^T + causal mask), row by row
/// ([seq, keySeq]).
void attentionProbabilities(const AttentionShape &s, const float *q,
                            const float *k, float scale, bool causal,
                            float *probabilities) {
  int seq = static_cast<int>(s.seq), keys = static_cast<int>(s.keySeq);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq, keys,
              static_cast<int>(s.dim), scale, q, s.queryStride(), k,
              s.kvStride(), 0.0f, probabilities, keys);
  for (int64_t i = 0; i < s.seq; ++i) {
    float *row = probabilities + i * s.keySeq;
    int64_t visible =
        causal ? std::min(s.first + i + 1, s.keySeq) : s.keySeq;
    softmaxRow(row, row, visible);
    std::fill(row + visible, row + s.keySeq, 0.0f);
  }
}

} // namespace

Status runAttention(const KernelArgs &args) {
  const std::vector<int64_t> &qs = args.in(0).shape(), &ks = args.in(1).shape();
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  AttentionShape s{qs[0], qs[1], qs[2], ks[2], qs[3], ks[1], *position * qs[1]};
  float scale = static_cast<float>(args.instruction.real("scale"));
  bool causal = args.instruction.flag("causal", true);
  const float *q = args.in(0).f32(), *k = args.in(1).f32(),
              *v = args.in(2).f32();
  int seq = static_cast<int>(s.seq), dim = static_cast<int>(s.dim);
  int keys = static_cast<int>(s.keySeq);
  std::vector<float> probabilities(s.seq * s.keySeq);

  if (args.instruction.op == "attention") {
    float *out = args.out(0).f32();
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.queryHeads; ++h) {
        attentionProbabilities(s, q + s.queryOffset(b, h), k + s.kvOffset(b, h),
                               scale, causal, probabilities.data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, seq, dim, keys,
                    1.0f, probabilities.data(), keys, v + s.kvOffset(b, h),
                    s.kvStride(), 0.0f, out + s.queryOffset(b, h),
                    s.queryStride());
      }
    return Status::success();
  }

  const float *dOut = args.in(3).f32();
  float *dq = args.out(0).f32(), *dk = args.out(1).f32(),
        *dv = args.out(2).f32();
  std::fill(dk, dk + args.out(1).size(), 0.0f);
  std::fill(dv, dv + args.out(2).size(), 0.0f);
  std::vector<float> dScores(s.seq * s.keySeq);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.queryHeads; ++h) {
      int64_t qo = s.queryOffset(b, h), ko = s.kvOffset(b, h);
      float *p = probabilities.data(), *ds = dScores.data();
      attentionProbabilities(s, q + qo, k + ko, scale, causal, p);
      // dV += P^T dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, dim, seq,
                  1.0f, p, keys, dOut + qo, s.queryStride(), 1.0f, dv + ko,
                  s.kvStride());
      // dP = dO V^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq, keys, dim,
                  1.0f, dOut + qo, s.queryStride(), v + ko, s.kvStride(), 0.0f,
                  ds, keys);
      // dS = P * (dP - rowsum(dP * P))
      for (int64_t i = 0; i < s.seq; ++i) {
        float *pRow = p + i * s.keySeq, *dRow = ds + i * s.keySeq;
        double dot = 0;
        for (int64_t j = 0; j < s.keySeq; ++j)
          dot += double(pRow[j]) * dRow[j];
        for (int64_t j = 0; j < s.keySeq; ++j)
          dRow[j] = pRow[j] * (dRow[j] - static_cast<float>(dot));
      }
      // dQ = scale dS K;  dK += scale dS^T Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, seq, dim, keys,
                  scale, ds, keys, k + ko, s.kvStride(), 0.0f, dq + qo,
                  s.queryStride());
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, dim, seq,
                  scale, ds, keys, q + qo, s.queryStride(), 1.0f, dk + ko,
                  s.kvStride());
    }
  return Status::success();
}

} // namespace trellis::runtime::cpu
