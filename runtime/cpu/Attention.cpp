//===- Attention.cpp - Scaled dot-product attention and its gradient ------===//
//
// Layout [batch, seq, heads, dim]; query head h reads key/value head
// h / (query heads / kv heads). Short key sequences go to DenseAttention;
// longer ones run on BlockedAttention's tiles (128 positions: causal
// attention skips the tiles above the diagonal, and no S x S matrix is
// formed); the blocked backward recomputes the forward's result and
// log-sum-exp first. A piece of the queries (context parallelism:
// split over the instruction's axes) sits at its place in the keys'
// sequence; with `chunks` the stored sequence is in zigzag order and the
// causal mask compares positions. A sliding `window` narrows the mask; a
// `softcap` bends the scores (c tanh(s / c)) before it; ALiBi's slopes add
// slope * (key position - query position) after it; sinks add a logit per
// head to each row's softmax denominator (their gradient is attention_grad's
// fourth result).
//
//===----------------------------------------------------------------------===//

#include "BlockedAttention.h"

#include "trellis/Common/SequenceChunks.h"

#include <algorithm>
#include <cmath>

namespace trellis::runtime::cpu {

Status runAttention(const KernelArgs &args) {
  const std::vector<int64_t> &qs = args.in(0).shape(), &ks = args.in(1).shape();
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  BlockShape s{qs[0], qs[1], ks[1], qs[2], ks[2], qs[3]};
  if (s.keySeq <= kDenseAttentionKeys)
    return runDenseAttention(args);
  // The queries sit at stored indices first ... of the keys' sequence.
  int64_t first = *position * s.querySeq;
  int64_t chunks = parametersOf<AttentionParameters>(args).chunks;
  AttentionRuns runs{
      tiled(positionRuns(
                sequencePositions(first, s.querySeq, s.keySeq, chunks)),
            kAttentionTile),
      tiled(positionRuns(sequencePositions(0, s.keySeq, s.keySeq, chunks)),
            kAttentionTile)};
  AttentionTensors t = attentionTensors(args);
  if (!rowOf(args).gradient)
    return blockedAttention(s, runs, t, args.out(0).f32(), nullptr);
  // The backward reads the forward's result and log-sum-exp: recomputed
  // here (the plan keeps neither).
  std::vector<float> result(args.in(0).size()),
      logSumExp(s.batch * s.queryHeads * s.querySeq);
  TRELLIS_RETURN_IF_ERROR(
      blockedAttention(s, runs, t, result.data(), logSumExp.data()));
  return blockedAttentionGrad(s, runs, t, result.data(), logSumExp.data(),
                              args.in(3).f32(), args.out(0).f32(),
                              args.out(1).f32(), args.out(2).f32(),
                              t.sinks ? args.out(3).f32() : nullptr);
}

std::vector<int64_t> sequencePositions(int64_t first, int64_t count,
                                       int64_t length, int64_t chunks) {
  std::vector<int64_t> positions(count);
  for (int64_t i = 0; i < count; ++i)
    positions[i] = sequencePosition(first + i, length, chunks);
  return positions;
}

std::vector<PositionRun> positionRuns(const std::vector<int64_t> &positions) {
  std::vector<PositionRun> runs;
  for (int64_t i = 0; i < static_cast<int64_t>(positions.size()); ++i) {
    if (!runs.empty() &&
        runs.back().position + runs.back().count == positions[i])
      ++runs.back().count;
    else
      runs.push_back({i, 1, positions[i]});
  }
  return runs;
}

AttentionMask AttentionMask::of(const KernelArgs &args) {
  const AttentionParameters &parameters =
      parametersOf<AttentionParameters>(args);
  return {parameters.causal, parameters.window};
}

std::pair<int64_t, int64_t> AttentionMask::range(int64_t query, int64_t first,
                                                 int64_t count) const {
  if (!causal)
    return {0, count};
  int64_t end = std::clamp<int64_t>(query - first + 1, 0, count);
  int64_t begin =
      window > 0 ? std::clamp<int64_t>(query - window + 1 - first, 0, end) : 0;
  return {begin, end};
}

void softCapRow(float *x, int64_t n, float cap, float *slopes) {
  float inverse = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) {
    float t = std::tanh(x[i] * inverse);
    x[i] = cap * t;
    if (slopes)
      slopes[i] = 1.0f - t * t;
  }
}

void addAlibiRow(float *x, int64_t n, float slope, int64_t offset) {
  for (int64_t j = 0; j < n; ++j)
    x[j] += slope * static_cast<float>(offset + j);
}

AttentionTensors attentionTensors(const KernelArgs &args) {
  const AttentionParameters &parameters =
      parametersOf<AttentionParameters>(args);
  AttentionTensors t{
      args.in(0).f32(),        args.in(1).f32(),
      args.in(2).f32(),        static_cast<float>(parameters.scale),
      AttentionMask::of(args), static_cast<float>(parameters.softcap)};
  if (parameters.slopesOperand >= 0)
    t.alibiSlopes = args.in(parameters.slopesOperand).f32();
  if (parameters.sinksOperand >= 0)
    t.sinks = args.in(parameters.sinksOperand).f32();
  return t;
}

Status runPositions(const KernelArgs &args) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  Tensor &out = args.out(0);
  int64_t count = out.size();
  std::vector<int64_t> positions =
      sequencePositions(*position * count, count, count * shardCount(args),
                        parametersOf<PositionParameters>(args).chunks);
  for (int64_t i = 0; i < count; ++i)
    out.i32()[i] = static_cast<int32_t>(positions[i]);
  return Status::success();
}

void registerAttentionKernels(KernelTable &table) {
  table.addMember(AttentionPiece::Whole, runAttention);
  table.addMember(PositionKind::Positions, runPositions);
}

} // namespace trellis::runtime::cpu
