//===- GraphInterfaces.h - Interfaces of graph ops --------------*- C++ -*-===//
//
// The sharding rule, gradient and cost interfaces, and the plain data they
// return.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_H
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace trellis::graph {

/// How splitting a factor affects an op (see ShardingRuleOpInterface).
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

/// A factor-based sharding rule: each dimension of each operand and result
/// maps to a factor index, or to kNoFactor for a dimension of size 1 that
/// takes part in no factor (a broadcast dimension).
struct ShardingRule {
  static constexpr int64_t kNoFactor = -1;

  llvm::SmallVector<int64_t> factorSizes;
  llvm::SmallVector<FactorKind> factorKinds;
  llvm::SmallVector<llvm::SmallVector<int64_t>> operandFactors;
  llvm::SmallVector<llvm::SmallVector<int64_t>> resultFactors;
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
    return factorSizes.size() - 1;
  }

  /// `([i, j], [j, k]) -> ([i, k]) {i=8 parallel, j=16 reduction, ...}`, for
  /// tests and reports.
  std::string toString() const;
};

/// The precision an op computes in under mixed precision (see
/// PrecisionOpInterface).
enum class PrecisionPolicy {
  /// The compute dtype (bf16 or f16): its f32 operands are cast down when
  /// they are parameters or meet a low-precision operand. The op's kernels
  /// still accumulate in fp32 (matmul sums, norm and softmax statistics).
  Low,
  /// fp32 inside, whatever its operands' dtype: the op reads bf16 or f16
  /// operands as they are and computes in fp32 (cross-entropy: the loss is
  /// f32; the logits' gradient, computed in fp32, rounds once to the
  /// logits' dtype, the values an fp32 copy cast back would have). No
  /// casts are inserted, so no fp32 copy of a low-precision operand lives
  /// between forward and backward.
  Float32,
  /// The dtype its operands have (casts themselves).
  Operands,
};

/// What one execution of an op costs.
struct OpCost {
  double flops = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
};

/// `flopsPerElement` per result element; every operand read once, every
/// result written once.
OpCost defaultCost(mlir::Operation *op, double flopsPerElement);

} // namespace trellis::graph

#include "trellis/Dialect/Graph/IR/GraphInterfaces.h.inc"

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_H
