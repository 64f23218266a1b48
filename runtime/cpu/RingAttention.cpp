//===- RingAttention.cpp - Ring attention's block kernels -----------------===//
//
// attention_block: this rank's queries against the key block of the rank
// `shift` places before it on the ring, as a normalized result and the
// rows' log-sum-exp; attention_merge combines two such results exactly;
// attention_block_grad is the block's share of the gradients, from the
// whole attention's result and log-sum-exp (FlashAttention-2's backward).
//
// The kernels are BlockedAttention's over the two blocks' positions: a
// zigzag block has two runs, and a pair of runs is empty (every key after
// every query: skipped), full, or diagonal (masked per element). That is
// where the zigzag order's balance comes from: every rank computes the
// same number of non-empty pairs.
//
//===----------------------------------------------------------------------===//

#include "BlockedAttention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace trellis::runtime::cpu {

namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

/// The positions of the queries' block and of the key block `shift`
/// places before it on the ring, in tiles.
StatusOr<AttentionRuns> blockRuns(const KernelArgs &args, int64_t seq) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  StatusOr<int64_t> source = ringSourcePosition(args);
  if (!source.ok())
    return source.status();
  int64_t ranks = shardCount(args);
  int64_t chunks = parametersOf<AttentionParameters>(args).chunks;
  int64_t length = seq * ranks;
  return AttentionRuns{
      tiled(
          positionRuns(sequencePositions(*position * seq, seq, length, chunks)),
          kAttentionTile),
      tiled(positionRuns(sequencePositions(*source * seq, seq, length, chunks)),
            kAttentionTile)};
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

} // namespace

Status runRingAttention(const KernelArgs &args) {
  const OpContract &row = rowOf(args);
  if (row.memberAs<AttentionPiece>() == AttentionPiece::Merge)
    return attentionMerge(args);
  const std::vector<int64_t> &qs = args.in(0).shape(),
                             &ks = args.in(1).shape();
  BlockShape s{qs[0], qs[1], ks[1], qs[2], ks[2], qs[3]};
  StatusOr<AttentionRuns> runs = blockRuns(args, s.querySeq);
  if (!runs.ok())
    return runs.status();
  AttentionTensors t = attentionTensors(args);
  if (!row.gradient)
    return blockedAttention(s, *runs, t, args.out(0).f32(), args.out(1).f32());
  return blockedAttentionGrad(s, *runs, t, args.in(3).f32(), args.in(4).f32(),
                              args.in(5).f32(), args.out(0).f32(),
                              args.out(1).f32(), args.out(2).f32(),
                              t.sinks ? args.out(3).f32() : nullptr);
}

void registerRingAttentionKernels(KernelTable &table) {
  table.addMember(AttentionPiece::Block, runRingAttention);
  table.addMember(AttentionPiece::Merge, runRingAttention);
}

} // namespace trellis::runtime::cpu
