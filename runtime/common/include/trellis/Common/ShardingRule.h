//===- ShardingRule.h - Factor-based sharding rules, MLIR-free --*- C++ -*-===//
//
// What splitting an op's tensors over mesh axes means for it, in the factor
// form of Shardy's OpShardingRule: every dimension of every operand and
// result maps to a factor (or to none), dimensions that share a factor are
// split alike, and each factor's kind says what splitting it does. The op
// table (OpContract.h) computes one per op instance; the compiler's
// propagation and partitioning and the cost query read it.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_SHARDINGRULE_H
#define TRELLIS_COMMON_SHARDINGRULE_H

#include <cstdint>
#include <string>
#include <vector>

namespace trellis {

/// How splitting a factor affects an op.
enum class FactorKind {
  /// Split it, and every operand and result that has it is split alike.
  Parallel,
  /// Appears in operands only; splitting it leaves the results partial sums.
  Reduction,
  /// Must stay whole: splitting it needs a gather first.
  Whole,
  /// May be split; the op then communicates itself over the splitting axes
  /// (vocabulary-parallel cross-entropy), and results that lack the factor
  /// are complete rather than partial.
  Collective,
};

/// "parallel", "reduction", "whole", "collective".
const char *factorKindName(FactorKind kind);

/// A factor-based sharding rule: each dimension of each operand and result
/// maps to a factor index, or to kNoFactor for a dimension of size 1 that
/// takes part in no factor (a broadcast dimension). A dimension's size is
/// its factor's size times a whole number (grouped-query attention maps
/// query heads to the kv-head factor).
struct ShardingRule {
  static constexpr int64_t kNoFactor = -1;

  std::vector<int64_t> factorSizes;
  std::vector<FactorKind> factorKinds;
  std::vector<std::vector<int64_t>> operandFactors;
  std::vector<std::vector<int64_t>> resultFactors;
  /// How results combine when a factor they lack is split: partial sums,
  /// or partial maxima (reduce_max).
  bool partialIsMax = false;
  /// The op is linear in every operand jointly (add, reshape, ...): when all
  /// operands are partial sums over the same axes, so is the result, and
  /// the reduction can wait.
  bool linear = false;
  /// The op is linear in this operand alone, the others not being sums
  /// (embedding_grad's ids): a partial sum of it gives a partial result.
  /// -1: none.
  int64_t linearOperand = -1;
  /// Each result element depends on the same element of every operand
  /// alone, and zeros give finite values (the optimizer updates, casts): a
  /// factor may be split over one axis that does not divide it, the last
  /// pieces padded with zeros that no valid element reads.
  bool paddable = false;

  /// Adds a factor and returns its index.
  int64_t addFactor(int64_t size, FactorKind kind) {
    factorSizes.push_back(size);
    factorKinds.push_back(kind);
    return static_cast<int64_t>(factorSizes.size()) - 1;
  }

  /// Adds one factor of `kind` per size and returns their indices.
  std::vector<int64_t> addFactors(const std::vector<int64_t> &sizes,
                                  FactorKind kind);

  /// `([f0, f2], [f2, f1]) -> ([f0, f1]) {f0=8 parallel, ...}`, with the
  /// flags that are set (`linear`, `partial max`, `linear in operand 1`,
  /// `paddable`) after the factors when `withFlags`.
  std::string toString(bool withFlags = false) const;
};

} // namespace trellis

#endif // TRELLIS_COMMON_SHARDINGRULE_H
