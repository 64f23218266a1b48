//===- BlockedAttention.h - Attention over tiles of positions ---*- C++ -*-===//
//
// The attention kernels' shared core (FlashAttention-2's algorithm on the
// CPU): queries and keys in runs of consecutive positions, cut into tiles;
// a pair of tiles is skipped when the mask (causal, perhaps a sliding
// window) hides it whole, computed fully when it shows it whole, masked
// per row to a range of keys on its edges. The
// forward keeps a running maximum and sum per row (online softmax), never
// an S x S matrix; the backward recomputes each tile's probabilities from
// the rows' log-sum-exp. Heads split over the device's OpenMP threads (the
// backward by kv head, adding its query heads in order), so results do
// not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CPU_BLOCKEDATTENTION_H
#define TRELLIS_RUNTIME_CPU_BLOCKEDATTENTION_H

#include "Kernels.h"

namespace trellis::runtime::cpu {

/// Queries [batch, querySeq, queryHeads, dim], keys and values [batch,
/// keySeq, kvHeads, dim], row log-sum-exps [batch, queryHeads, querySeq].
struct BlockShape {
  int64_t batch, querySeq, keySeq, queryHeads, kvHeads, dim;
  int queryStride() const { return static_cast<int>(queryHeads * dim); }
  int kvStride() const { return static_cast<int>(kvHeads * dim); }
  int64_t group() const { return queryHeads / kvHeads; }
  int64_t queryOffset(int64_t b, int64_t h, int64_t row) const {
    return ((b * querySeq + row) * queryHeads + h) * dim;
  }
  int64_t kvOffset(int64_t b, int64_t h, int64_t row) const {
    return ((b * keySeq + row) * kvHeads + h / group()) * dim;
  }
  int64_t rowOffset(int64_t b, int64_t h) const {
    return (b * queryHeads + h) * querySeq;
  }
};

/// The positions of the queries and of the keys, as runs (positionRuns).
struct AttentionRuns {
  std::vector<PositionRun> queries, keys;
};

/// Positions per tile: a tile pair's scores (128 x 128 floats, 64 KiB)
/// stay in L2 with the tiles' rows.
constexpr int64_t kAttentionTile = 128;

/// `runs` cut into tiles of at most `tile` positions.
std::vector<PositionRun> tiled(const std::vector<PositionRun> &runs,
                               int64_t tile);

/// An attention instruction's operands and score rule: scores are
/// scale q k^T, soft-capped when softcap > 0, plus ALiBi's
/// alibiSlopes[h] * (key position - query position) when given, then
/// masked; with `sinks`, head h's softmax denominator has exp(sinks[h]) too.
struct AttentionTensors {
  const float *query, *key, *value;
  float scale;
  AttentionMask mask;
  float softcap = 0;
  const float *alibiSlopes = nullptr;
  const float *sinks = nullptr;
};

/// The first three operands and the attributes of an attention
/// instruction (attention, attention_grad, attention_block and its grad).
AttentionTensors attentionTensors(const KernelArgs &args);

/// out = softmax(mask(alibi(softcap(scale q k^T)))) v, rows without a
/// visible key zero; logSumExp (may be null) the rows' log-sum-exp (of the
/// sink too), -inf for rows that see nothing.
Status blockedAttention(const BlockShape &s, const AttentionRuns &runs,
                        const AttentionTensors &t, float *out,
                        float *logSumExp);

/// The gradients for query, key and value of the attention whose result
/// and log-sum-exp are `result` and `logSumExp` (of every key the queries
/// see; `runs` may cover a part of them: ring attention's block), given
/// the result's gradient. Overwrites dq, dk and dv, and, when not null,
/// the sinks' gradient dSinks [queryHeads] (of every query row: the sinks
/// are counted once, whichever block `runs` covers).
Status blockedAttentionGrad(const BlockShape &s, const AttentionRuns &runs,
                            const AttentionTensors &t, const float *result,
                            const float *logSumExp, const float *resultGrad,
                            float *dq, float *dk, float *dv, float *dSinks);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_BLOCKEDATTENTION_H
