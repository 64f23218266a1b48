//===- RingAttentionTest.cpp - Ring attention's kernels against attention -===//
//
// On one rank (a ring of one): attention_block over a zigzag-ordered
// sequence equals attention over it, attention_block_grad equals
// attention_grad, and attention_merge of two key halves equals attention
// over both. Long sequences (tiles: kDenseAttentionKeys and beyond) match
// a double-precision reference, forward and backward. The multi-rank ring is checked end to end by the
// context-parallel tests (losses and parameters equal the one-rank run).
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include "trellis/Common/SequenceChunks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace trellis;
using namespace trellis::runtime;
using namespace trellis::runtime::testing;

namespace {

/// f32 tensors on a one-thread CPU device, filled in [-1, 1).
class Kernels : public DeviceTensors {
public:
  explicit Kernels(const std::string &backend) : DeviceTensors(1, backend) {}

  /// A new f32 tensor of `shape`, filled from a fixed pseudo-random
  /// sequence when `seed` > 0 (zeros otherwise); returns its index.
  int64_t add(const std::vector<int64_t> &shape, int seed = 0) {
    int64_t id = DeviceTensors::add(shape, DType::F32);
    if (seed > 0) {
      std::vector<float> values(floats(id).size());
      uint32_t state = seed * 2654435761u;
      for (float &value : values) {
        state = state * 1664525u + 1013904223u;
        value = static_cast<float>(state >> 8) / float(1 << 24) * 2 - 1;
      }
      set(id, values);
    }
    return id;
  }

  std::vector<float> read(int64_t index) { return floats(index); }

  void expectNear(int64_t expected, int64_t found, const char *what) {
    std::vector<float> a = read(expected), b = read(found);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(b[i], a[i], 1e-5f * std::max(1.0f, std::abs(a[i])))
          << what << " element " << i;
  }
};

/// Causal attention's attributes at scale 0.35; chunks, window and
/// softcap only where non-zero.
std::map<std::string, AttrValue> causalAttrs(int64_t chunks, int64_t window,
                                             double softcap) {
  std::map<std::string, AttrValue> attrs = {{"scale", real(0.35)},
                                            {"causal", flag(true)}};
  if (chunks)
    attrs["chunks"] = integer(chunks);
  if (window)
    attrs["window"] = integer(window);
  if (softcap)
    attrs["softcap"] = real(softcap);
  return attrs;
}

/// Which of attention's per-head terms an instruction has: ALiBi's slopes
/// (BLOOM's for 4 heads) and sinks.
struct HeadTerms {
  bool alibi = false, sinks = false;
};

const std::vector<float> kAlibiSlopes = {0.25f, 0.0625f, 0.015625f,
                                         0.00390625f};
const std::vector<float> kSinks = {0.5f, -1.0f, 2.0f, 0.0f};

/// The operands and segment attribute of `terms` after `required`
/// operands (added to `inputs` and `attrs`).
void addHeadTerms(Kernels &k, HeadTerms terms, size_t required,
                  std::vector<int64_t> &inputs,
                  std::map<std::string, AttrValue> &attrs) {
  if (!terms.alibi && !terms.sinks)
    return;
  if (terms.alibi) {
    int64_t slopes = k.add({4});
    k.set(slopes, kAlibiSlopes);
    inputs.push_back(slopes);
  }
  if (terms.sinks) {
    int64_t sinks = k.add({4});
    k.set(sinks, kSinks);
    inputs.push_back(sinks);
  }
  std::vector<int64_t> segments(required, 1);
  segments.push_back(terms.alibi);
  segments.push_back(terms.sinks);
  attrs["operandSegmentSizes"] = integers(segments);
}

/// The results of attention and attention_grad over (q, key, value) with
/// `attrs` and `terms`, given the result's gradient dOut (the sinks'
/// gradient allocated, and written when `terms` has sinks).
struct AttentionRun {
  int64_t out, dq, dk, dv, dSinks;
};

AttentionRun runAttentionAndGrad(Kernels &k, int64_t q, int64_t key,
                                 int64_t value, int64_t dOut,
                                 const std::vector<int64_t> &qShape,
                                 const std::vector<int64_t> &kvShape,
                                 const std::map<std::string, AttrValue> &attrs,
                                 HeadTerms terms) {
  std::map<std::string, AttrValue> forwardAttrs = attrs, gradAttrs = attrs;
  std::vector<int64_t> inputs = {q, key, value},
                       gradInputs = {q, key, value, dOut};
  addHeadTerms(k, terms, 3, inputs, forwardAttrs);
  addHeadTerms(k, terms, 4, gradInputs, gradAttrs);
  AttentionRun run{k.add(qShape), k.add(qShape), k.add(kvShape), k.add(kvShape),
                   k.add({4})};
  k.run("attention", inputs, {run.out}, forwardAttrs);
  std::vector<int64_t> gradOutputs = {run.dq, run.dk, run.dv};
  if (terms.sinks)
    gradOutputs.push_back(run.dSinks);
  k.run("attention_grad", gradInputs, gradOutputs, gradAttrs);
  return run;
}

class RingAttentionTest : public EveryBackend {};
TRELLIS_ON_EVERY_BACKEND(RingAttentionTest);

TEST_P(RingAttentionTest, ZigzagOrderHoldsEarlyAndLateChunks) {
  // 2 ranks, 4 chunks of 3: rank 0 holds chunks 0 and 3, rank 1 chunks 1
  // and 2.
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < 12; ++i)
    positions.push_back(sequencePosition(i, 12, 4));
  EXPECT_EQ(positions, (std::vector<int64_t>{0, 1, 2, 9, 10, 11, 3, 4, 5, 6,
                                             7, 8}));
  EXPECT_EQ(sequencePosition(5, 12, 0), 5);
}

// The block kernels over a sequence stored in zigzag order of 4 chunks,
// grouped-query heads: the causal mask meets empty, full and diagonal
// pairs of position runs; with a sliding window and soft-capping too.
TEST_P(RingAttentionTest, BlockEqualsAttentionOverAZigzagSequence) {
  for (int64_t chunks : {0, 4})
    for (int shaping = 0; shaping < 3; ++shaping) {
      // Plain; a sliding window and soft-capping; ALiBi and sinks too.
      bool shaped = shaping > 0;
      HeadTerms terms{shaping == 2, shaping == 2};
      Kernels k(GetParam());
      const std::vector<int64_t> qShape{2, 12, 4, 8}, kvShape{2, 12, 2, 8};
      int64_t q = k.add(qShape, 1), key = k.add(kvShape, 2),
              value = k.add(kvShape, 3), dOut = k.add(qShape, 4);
      AttentionRun whole = runAttentionAndGrad(
          k, q, key, value, dOut, qShape, kvShape,
          causalAttrs(chunks, shaped ? 5 : 0, shaped ? 1.0 : 0.0), terms);

      std::map<std::string, AttrValue> blockAttrs =
          causalAttrs(chunks, shaped ? 5 : 0, shaped ? 1.0 : 0.0);
      blockAttrs["shift"] = integer(0);
      std::map<std::string, AttrValue> blockGradAttrs = blockAttrs;
      int64_t out = k.add(qShape), logSumExp = k.add({2, 4, 12});
      std::vector<int64_t> blockInputs = {q, key, value};
      addHeadTerms(k, terms, 3, blockInputs, blockAttrs);
      k.run("attention_block", blockInputs, {out, logSumExp}, blockAttrs);
      k.expectNear(whole.out, out, "result");
      int64_t bq = k.add(qShape), bk = k.add(kvShape), bv = k.add(kvShape),
              bSinks = k.add({4});
      std::vector<int64_t> blockGradInputs = {q,   key,       value,
                                              out, logSumExp, dOut};
      addHeadTerms(k, terms, 6, blockGradInputs, blockGradAttrs);
      std::vector<int64_t> blockGradOutputs = {bq, bk, bv};
      if (terms.sinks)
        blockGradOutputs.push_back(bSinks);
      k.run("attention_block_grad", blockGradInputs, blockGradOutputs,
            blockGradAttrs);
      k.expectNear(whole.dq, bq, "query gradient");
      k.expectNear(whole.dk, bk, "key gradient");
      k.expectNear(whole.dv, bv, "value gradient");
      if (terms.sinks)
        k.expectNear(whole.dSinks, bSinks, "sinks gradient");
    }
}

// Without a mask, two key blocks merged by log-sum-exp are attention over
// both; so are their gradients summed.
TEST_P(RingAttentionTest, MergedBlocksEqualAttentionOverBoth) {
  Kernels k(GetParam());
  const std::vector<int64_t> qShape{1, 6, 2, 4}, kvShape{1, 6, 2, 4},
      wholeShape{1, 12, 2, 4};
  int64_t q = k.add(qShape, 5), k1 = k.add(kvShape, 6), v1 = k.add(kvShape, 7),
          k2 = k.add(kvShape, 8), v2 = k.add(kvShape, 9);
  int64_t keys = k.add(wholeShape), values = k.add(wholeShape);
  AttrValue dim;
  dim.kind = AttrValue::Kind::Int;
  dim.integer = 1;
  k.run("concat", {k1, k2}, {keys}, {{"dim", dim}});
  k.run("concat", {v1, v2}, {values}, {{"dim", dim}});
  std::map<std::string, AttrValue> attrs = {{"scale", real(0.5)},
                                            {"causal", flag(false)}};
  int64_t expected = k.add(qShape);
  k.run("attention", {q, keys, values}, {expected}, attrs);

  attrs["shift"] = integer(0);
  int64_t o1 = k.add(qShape), l1 = k.add({1, 2, 6}), o2 = k.add(qShape),
          l2 = k.add({1, 2, 6}), merged = k.add(qShape),
          mergedSums = k.add({1, 2, 6});
  k.run("attention_block", {q, k1, v1}, {o1, l1}, attrs);
  k.run("attention_block", {q, k2, v2}, {o2, l2}, attrs);
  k.run("attention_merge", {o1, l1, o2, l2}, {merged, mergedSums}, {});
  k.expectNear(expected, merged, "merged result");
  // Merged in the other order, the same.
  int64_t swapped = k.add(qShape), swappedSums = k.add({1, 2, 6});
  k.run("attention_merge", {o2, l2, o1, l1}, {swapped, swappedSums}, {});
  k.expectNear(merged, swapped, "merged in the other order");
}

/// softmax(mask(alibi(softcap(scale q k^T)))) v per head in double, the
/// mask causal over `positions` (and a sliding window when window > 0), a
/// sink's logit in each denominator when `sinks` is not empty, and its
/// gradients for q, k and v given dOut ([S, heads, D] with one kv head per
/// two query heads).
struct Reference {
  int64_t seq, heads, kvHeads, dim;
  double scale;
  std::vector<int64_t> positions;
  int64_t window = 0;
  double softcap = 0;
  std::vector<float> alibiSlopes, sinks;

  int64_t q(int64_t i, int64_t h, int64_t d) const {
    return (i * heads + h) * dim + d;
  }
  int64_t kv(int64_t j, int64_t h, int64_t d) const {
    return (j * kvHeads + h / (heads / kvHeads)) * dim + d;
  }
  bool sees(int64_t i, int64_t j) const {
    int64_t query = positions[i], key = positions[j];
    return key <= query && (window <= 0 || key > query - window);
  }
  /// Probabilities of head h, row i; slopes[j] the score's derivative
  /// through the soft-cap; sinkShare the sink's probability.
  std::vector<double> row(const std::vector<float> &qs,
                          const std::vector<float> &ks, int64_t h, int64_t i,
                          std::vector<double> &slopes,
                          double &sinkShare) const {
    std::vector<double> p(seq, 0.0);
    slopes.assign(seq, 1.0);
    double max = sinks.empty() ? -1e300 : sinks[h], sum = 0;
    for (int64_t j = 0; j < seq; ++j) {
      if (!sees(i, j))
        continue;
      double dot = 0;
      for (int64_t d = 0; d < dim; ++d)
        dot += double(qs[q(i, h, d)]) * ks[kv(j, h, d)];
      p[j] = dot * scale;
      if (softcap > 0) {
        double t = std::tanh(p[j] / softcap);
        p[j] = softcap * t;
        slopes[j] = 1 - t * t;
      }
      if (!alibiSlopes.empty())
        p[j] += alibiSlopes[h] * double(positions[j] - positions[i]);
      max = std::max(max, p[j]);
    }
    double sink = sinks.empty() ? 0 : std::exp(sinks[h] - max);
    sum = sink;
    for (int64_t j = 0; j < seq; ++j)
      sum += (p[j] = sees(i, j) ? std::exp(p[j] - max) : 0);
    for (double &value : p)
      value /= sum;
    sinkShare = sink / sum;
    return p;
  }
};

/// attention and attention_grad over `seq` positions (stored in zigzag
/// order of `chunks`) against Reference, forward and backward.
void expectLikeReference(const std::string &backend, int64_t seq,
                         int64_t chunks, int64_t window, double softcap,
                         HeadTerms terms = {}) {
  SCOPED_TRACE(::testing::Message()
               << "seq " << seq << ", chunks " << chunks << ", window "
               << window << ", softcap " << softcap << ", alibi " << terms.alibi
               << ", sinks " << terms.sinks);
  Kernels k(backend);
  const std::vector<int64_t> qShape{1, seq, 4, 8}, kvShape{1, seq, 2, 8};
  int64_t q = k.add(qShape, 11), key = k.add(kvShape, 12),
          value = k.add(kvShape, 13), dOut = k.add(qShape, 14);
  auto [out, dq, dk, dv, dSinks] =
      runAttentionAndGrad(k, q, key, value, dOut, qShape, kvShape,
                          causalAttrs(chunks, window, softcap), terms);

  Reference ref{seq, 4, 2, 8, 0.35, {}, window, softcap, {}, {}};
  if (terms.alibi)
    ref.alibiSlopes = kAlibiSlopes;
  if (terms.sinks)
    ref.sinks = kSinks;
  for (int64_t i = 0; i < seq; ++i)
    ref.positions.push_back(sequencePosition(i, seq, chunks));
  std::vector<float> qs = k.read(q), ks = k.read(key), vs = k.read(value),
                     gs = k.read(dOut), os = k.read(out), dqs = k.read(dq),
                     dks = k.read(dk), dvs = k.read(dv);
  std::vector<double> eq(qs.size()), ek(ks.size()), ev(vs.size()), slopes,
      eSinks(4, 0.0);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < seq; ++i) {
      double sinkShare = 0;
      std::vector<double> p = ref.row(qs, ks, h, i, slopes, sinkShare);
      double rowDot = 0;
      std::vector<double> dp(seq, 0.0);
      for (int64_t d = 0; d < 8; ++d) {
        double o = 0;
        for (int64_t j = 0; j < seq; ++j)
          o += p[j] * vs[ref.kv(j, h, d)];
        ASSERT_NEAR(os[ref.q(i, h, d)], o, 2e-5) << "result, row " << i;
        rowDot += o * gs[ref.q(i, h, d)];
      }
      eSinks[h] -= sinkShare * rowDot;
      for (int64_t j = 0; j < seq; ++j)
        for (int64_t d = 0; d < 8; ++d) {
          dp[j] += double(gs[ref.q(i, h, d)]) * vs[ref.kv(j, h, d)];
          ev[ref.kv(j, h, d)] += p[j] * gs[ref.q(i, h, d)];
        }
      for (int64_t j = 0; j < seq; ++j) {
        double ds = p[j] * (dp[j] - rowDot) * slopes[j] * 0.35;
        for (int64_t d = 0; d < 8; ++d) {
          eq[ref.q(i, h, d)] += ds * ks[ref.kv(j, h, d)];
          ek[ref.kv(j, h, d)] += ds * qs[ref.q(i, h, d)];
        }
      }
    }
  for (size_t i = 0; i < eq.size(); ++i)
    ASSERT_NEAR(dqs[i], eq[i], 2e-5) << "query gradient " << i;
  for (size_t i = 0; i < ek.size(); ++i) {
    ASSERT_NEAR(dks[i], ek[i], 2e-5) << "key gradient " << i;
    ASSERT_NEAR(dvs[i], ev[i], 2e-5) << "value gradient " << i;
  }
  if (terms.sinks) {
    std::vector<float> found = k.read(dSinks);
    for (int64_t h = 0; h < 4; ++h)
      ASSERT_NEAR(found[h], eSinks[h],
                  2e-5 * std::max(1.0, std::abs(eSinks[h])))
          << "sinks gradient " << h;
  }
}

TEST_P(RingAttentionTest, LongSequencesRunInTilesLikeADoubleReference) {
  const int64_t seq = 3 * 128 + 18; // 3 full tiles and a short one
  for (int64_t chunks : {0, 6})
    expectLikeReference(GetParam(), seq, chunks, 0, 0);
}

// A sliding window (Mistral, Gemma 2) skips the tiles before it and cuts
// rows on its edge; soft-capping (Gemma 2) bends the scores and their
// gradient. Tiled (long) and dense (short) kernels, natural and zigzag
// order.
TEST_P(RingAttentionTest, SlidingWindowsAndSoftCapsLikeADoubleReference) {
  const int64_t seq = 3 * 128 + 18;
  for (int64_t chunks : {0, 6}) {
    expectLikeReference(GetParam(), seq, chunks, 150, 0);
    expectLikeReference(GetParam(), seq, chunks, 0, 1.0);
    expectLikeReference(GetParam(), seq, chunks, 129, 1.0);
    expectLikeReference(GetParam(), 40, chunks / 3, 7, 0);
    expectLikeReference(GetParam(), 40, chunks / 3, 9, 1.5);
  }
  // A window of one position: each query sees only itself.
  expectLikeReference(GetParam(), 20, 0, 1, 0);
}

// ALiBi (BLOOM, MPT) penalizes distance per head; attention sinks
// (GPT-OSS) take a share of every row's softmax and get a gradient.
// Tiled (long) and dense (short) kernels, natural and zigzag order, with
// and without a sliding window and soft-capping.
TEST_P(RingAttentionTest, AlibiAndSinksLikeADoubleReference) {
  const int64_t seq = 2 * 128 + 18;
  for (HeadTerms terms :
       {HeadTerms{true, false}, HeadTerms{false, true}, HeadTerms{true, true}})
    for (int64_t chunks : {0, 6}) {
      expectLikeReference(GetParam(), seq, chunks, 0, 0, terms);
      expectLikeReference(GetParam(), seq, chunks, 140, 1.0, terms);
      expectLikeReference(GetParam(), 40, chunks / 3, 0, 0, terms);
      expectLikeReference(GetParam(), 40, chunks / 3, 9, 1.5, terms);
    }
}

} // namespace
