//===- GraphShardingRules.cpp - Sharding rules of graph ops ---------------===//
//
// getShardingRule of every graph op. A factor's size is the largest number
// of equal pieces it can be split into consistently across every tensor
// that has it (for grouped-query attention: the kv-head count).
//
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "llvm/Support/raw_ostream.h"

#include <numeric>

using namespace mlir;
using namespace trellis::graph;

std::string ShardingRule::toString() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto printFactor = [&](int64_t factor) {
    if (factor == kNoFactor)
      os << "_";
    else
      os << "f" << factor;
  };
  auto printTensors = [&](ArrayRef<SmallVector<int64_t>> tensors) {
    os << "(";
    llvm::interleaveComma(tensors, os, [&](const SmallVector<int64_t> &dims) {
      os << "[";
      llvm::interleaveComma(dims, os, printFactor);
      os << "]";
    });
    os << ")";
  };
  printTensors(operandFactors);
  os << " -> ";
  printTensors(resultFactors);
  os << " {";
  for (size_t f = 0; f < factorSizes.size(); ++f) {
    static const char *kinds[] = {"parallel", "reduction", "whole",
                                  "collective"};
    os << (f ? ", " : "") << "f" << f << "=" << factorSizes[f] << " "
       << kinds[static_cast<int>(factorKinds[f])];
  }
  os << "}";
  return text;
}

namespace {

ArrayRef<int64_t> shapeOf(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getShape();
}

/// One parallel factor per dimension of `result`; each operand's dimensions
/// map to the result factor they broadcast into, or to none where they are
/// stretched from size 1.
ShardingRule elementwiseRule(ValueRange operands, Value result) {
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(result);
  SmallVector<int64_t> factors;
  for (int64_t size : shape)
    factors.push_back(rule.addFactor(size, FactorKind::Parallel));
  for (Value operand : operands) {
    ArrayRef<int64_t> operandShape = shapeOf(operand);
    size_t lead = shape.size() - operandShape.size();
    SmallVector<int64_t> dims;
    for (size_t d = 0; d < operandShape.size(); ++d)
      dims.push_back(operandShape[d] == shape[lead + d]
                         ? factors[lead + d]
                         : ShardingRule::kNoFactor);
    rule.operandFactors.push_back(dims);
  }
  rule.resultFactors.push_back(factors);
  return rule;
}

/// Every dimension parallel, except the last, which must stay whole; every
/// operand and result has the input's shape.
ShardingRule rowwiseRule(unsigned numOperands, unsigned numResults,
                         ArrayRef<int64_t> shape) {
  ShardingRule rule;
  SmallVector<int64_t> factors;
  for (size_t d = 0; d < shape.size(); ++d)
    factors.push_back(rule.addFactor(shape[d], d + 1 == shape.size()
                                                   ? FactorKind::Whole
                                                   : FactorKind::Parallel));
  rule.operandFactors.assign(numOperands, factors);
  rule.resultFactors.assign(numResults, factors);
  return rule;
}

/// A normalization [..., E] with per-feature vectors [E]: rows parallel,
/// features whole. `vectorResults` results of shape [E] sum over the rows,
/// so splitting the rows leaves them partial.
ShardingRule normRule(ArrayRef<int64_t> shape, unsigned rowOperands,
                      unsigned vectorOperands, unsigned rowResults,
                      unsigned vectorResults) {
  ShardingRule rule = rowwiseRule(rowOperands, rowResults, shape);
  SmallVector<int64_t> vector = {rule.resultFactors.empty()
                                     ? rule.operandFactors[0].back()
                                     : rule.resultFactors[0].back()};
  // Operand order: the first row operand, the vectors, then the others.
  rule.operandFactors.insert(rule.operandFactors.begin() + 1, vectorOperands,
                             vector);
  rule.resultFactors.append(vectorResults, vector);
  return rule;
}

SmallVector<int64_t> addFactors(ShardingRule &rule, ArrayRef<int64_t> shape,
                                FactorKind kind) {
  SmallVector<int64_t> factors;
  for (int64_t size : shape)
    factors.push_back(rule.addFactor(size, kind));
  return factors;
}

} // namespace

//===----------------------------------------------------------------------===//
// Constants and elementwise ops
//===----------------------------------------------------------------------===//

ShardingRule FillOp::getShardingRule() {
  ShardingRule rule;
  rule.resultFactors.push_back(
      addFactors(rule, shapeOf(getResult()), FactorKind::Parallel));
  return rule;
}

#define GRAPH_ELEMENTWISE_RULE(OP)                                             \
  ShardingRule OP::getShardingRule() {                                         \
    return elementwiseRule(getOperation()->getOperands(), getResult());        \
  }
// Linear in their operands: partial sums pass through.
#define GRAPH_LINEAR_ELEMENTWISE_RULE(OP)                                      \
  ShardingRule OP::getShardingRule() {                                         \
    ShardingRule rule =                                                        \
        elementwiseRule(getOperation()->getOperands(), getResult());           \
    rule.linear = true;                                                        \
    return rule;                                                               \
  }
GRAPH_LINEAR_ELEMENTWISE_RULE(AddOp)
GRAPH_LINEAR_ELEMENTWISE_RULE(SubOp)
GRAPH_LINEAR_ELEMENTWISE_RULE(ScaleOp)
GRAPH_LINEAR_ELEMENTWISE_RULE(MicrobatchSumOp)
GRAPH_LINEAR_ELEMENTWISE_RULE(NegOp)
GRAPH_LINEAR_ELEMENTWISE_RULE(BroadcastToOp)
#undef GRAPH_LINEAR_ELEMENTWISE_RULE
// Linear unless marked graph.reduce_first (partials are reduced before it).
ShardingRule CastOp::getShardingRule() {
  ShardingRule rule = elementwiseRule(getOperation()->getOperands(), getResult());
  rule.linear = !getOperation()->hasAttr(GraphDialect::kReduceFirstAttrName);
  rule.paddable = true;
  return rule;
}
GRAPH_ELEMENTWISE_RULE(MulOp)
GRAPH_ELEMENTWISE_RULE(DivOp)
GRAPH_ELEMENTWISE_RULE(MaximumOp)
GRAPH_ELEMENTWISE_RULE(EqualMaskOp)
GRAPH_ELEMENTWISE_RULE(ExpOp)
GRAPH_ELEMENTWISE_RULE(LogOp)
GRAPH_ELEMENTWISE_RULE(TanhOp)
GRAPH_ELEMENTWISE_RULE(SqrtOp)
GRAPH_ELEMENTWISE_RULE(RsqrtOp)
GRAPH_ELEMENTWISE_RULE(SigmoidOp)
GRAPH_ELEMENTWISE_RULE(SiluOp)
GRAPH_ELEMENTWISE_RULE(GeluOp)
GRAPH_ELEMENTWISE_RULE(GeluTanhOp)
GRAPH_ELEMENTWISE_RULE(ReluOp)
GRAPH_ELEMENTWISE_RULE(UnaryGradOp)
#undef GRAPH_ELEMENTWISE_RULE

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
/// Kept dimensions parallel; reduced ones `reducedKind`.
ShardingRule reduceRule(Value input, ArrayRef<int64_t> dims, bool keepDims,
                        FactorKind reducedKind) {
  ShardingRule rule;
  SmallVector<int64_t> inputFactors, resultFactors;
  for (auto [d, size] : llvm::enumerate(shapeOf(input))) {
    bool reduced = llvm::is_contained(dims, static_cast<int64_t>(d));
    int64_t factor =
        rule.addFactor(size, reduced ? reducedKind : FactorKind::Parallel);
    inputFactors.push_back(factor);
    if (!reduced)
      resultFactors.push_back(factor);
    else if (keepDims)
      resultFactors.push_back(ShardingRule::kNoFactor);
  }
  rule.operandFactors.push_back(inputFactors);
  rule.resultFactors.push_back(resultFactors);
  return rule;
}
} // namespace

ShardingRule ReduceSumOp::getShardingRule() {
  ShardingRule rule =
      reduceRule(getInput(), getDims(), getKeepDims(), FactorKind::Reduction);
  rule.linear = true;
  return rule;
}

// A mean over a split dimension is not a partial sum of local means: keep
// the reduced dimensions whole.
ShardingRule ReduceMeanOp::getShardingRule() {
  return reduceRule(getInput(), getDims(), getKeepDims(), FactorKind::Whole);
}

// Splitting a max-reduced dimension leaves the result partial with kind max.
ShardingRule ReduceMaxOp::getShardingRule() {
  ShardingRule rule =
      reduceRule(getInput(), getDims(), getKeepDims(), FactorKind::Reduction);
  rule.partialIsMax = true;
  return rule;
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

ShardingRule ReshapeOp::getShardingRule() {
  // Groups of dimensions with equal products correspond. Within a group the
  // most major dimensions of both sides share one parallel factor when one
  // divides the other (splitting [B, S] -> [B*S] over B keeps contiguous
  // pieces); the other dimensions of a merged or split group stay whole.
  ShardingRule rule;
  ArrayRef<int64_t> from = shapeOf(getInput()), to = shapeOf(getResult());
  SmallVector<int64_t> fromFactors(from.size(), ShardingRule::kNoFactor);
  SmallVector<int64_t> toFactors(to.size(), ShardingRule::kNoFactor);
  size_t i = 0, j = 0;
  while (i < from.size() || j < to.size()) {
    // Size-1 dimensions take part in no factor.
    if (i < from.size() && from[i] == 1) {
      ++i;
      continue;
    }
    if (j < to.size() && to[j] == 1) {
      ++j;
      continue;
    }
    if (i == from.size() || j == to.size())
      break;
    size_t groupStartFrom = i, groupStartTo = j;
    int64_t fromProduct = from[i++], toProduct = to[j++];
    while (fromProduct != toProduct) {
      if (fromProduct < toProduct && i < from.size())
        fromProduct *= from[i++];
      else if (j < to.size())
        toProduct *= to[j++];
      else
        break;
    }
    int64_t majorFrom = from[groupStartFrom], majorTo = to[groupStartTo];
    if (majorFrom % majorTo == 0 || majorTo % majorFrom == 0) {
      int64_t shared =
          rule.addFactor(std::min(majorFrom, majorTo), FactorKind::Parallel);
      fromFactors[groupStartFrom] = shared;
      toFactors[groupStartTo] = shared;
    } else {
      fromFactors[groupStartFrom] =
          rule.addFactor(majorFrom, FactorKind::Whole);
      toFactors[groupStartTo] = rule.addFactor(majorTo, FactorKind::Whole);
    }
    for (size_t d = groupStartFrom + 1; d < i; ++d)
      if (from[d] != 1)
        fromFactors[d] = rule.addFactor(from[d], FactorKind::Whole);
    for (size_t d = groupStartTo + 1; d < j; ++d)
      if (to[d] != 1)
        toFactors[d] = rule.addFactor(to[d], FactorKind::Whole);
  }
  rule.operandFactors.push_back(fromFactors);
  rule.resultFactors.push_back(toFactors);
  rule.linear = true;
  return rule;
}

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> inputFactors =
      addFactors(rule, shapeOf(getInput()), FactorKind::Parallel);
  SmallVector<int64_t> resultFactors;
  for (int64_t d : getPermutation())
    resultFactors.push_back(inputFactors[d]);
  rule.operandFactors.push_back(inputFactors);
  rule.resultFactors.push_back(resultFactors);
  rule.linear = true;
  return rule;
}

namespace {
/// Dimensions that `changed` leaves alone are parallel; others whole.
ShardingRule boxRule(Value input, Value result,
                     llvm::function_ref<bool(size_t)> changed) {
  ShardingRule rule;
  SmallVector<int64_t> inputFactors, resultFactors;
  ArrayRef<int64_t> inShape = shapeOf(input), outShape = shapeOf(result);
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (changed(d)) {
      inputFactors.push_back(rule.addFactor(inShape[d], FactorKind::Whole));
      resultFactors.push_back(rule.addFactor(outShape[d], FactorKind::Whole));
    } else {
      int64_t factor = rule.addFactor(inShape[d], FactorKind::Parallel);
      inputFactors.push_back(factor);
      resultFactors.push_back(factor);
    }
  }
  rule.operandFactors.push_back(inputFactors);
  rule.resultFactors.push_back(resultFactors);
  rule.linear = true;
  return rule;
}
} // namespace

ShardingRule SliceOp::getShardingRule() {
  return boxRule(getInput(), getResult(), [&](size_t d) {
    return getSizes()[d] != shapeOf(getInput())[d];
  });
}

ShardingRule PadOp::getShardingRule() {
  return boxRule(getInput(), getResult(), [&](size_t d) {
    return getLow()[d] != 0 || getHigh()[d] != 0;
  });
}

ShardingRule ConcatOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(getResult());
  SmallVector<int64_t> factors;
  for (size_t d = 0; d < shape.size(); ++d)
    factors.push_back(d == static_cast<size_t>(getDim())
                          ? ShardingRule::kNoFactor
                          : rule.addFactor(shape[d], FactorKind::Parallel));
  for (Value input : getInputs()) {
    SmallVector<int64_t> inputFactors(factors);
    inputFactors[getDim()] =
        rule.addFactor(shapeOf(input)[getDim()], FactorKind::Whole);
    rule.operandFactors.push_back(inputFactors);
  }
  factors[getDim()] = rule.addFactor(shape[getDim()], FactorKind::Whole);
  rule.resultFactors.push_back(factors);
  rule.linear = true;
  return rule;
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

ShardingRule MatmulOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  ArrayRef<int64_t> result = shapeOf(getResult());
  size_t batchRank = lhs.size() - 2;
  SmallVector<int64_t> batch =
      addFactors(rule, lhs.take_front(batchRank), FactorKind::Parallel);
  int64_t m = rule.addFactor(result[batchRank], FactorKind::Parallel);
  int64_t n = rule.addFactor(result[batchRank + 1], FactorKind::Parallel);
  int64_t k = rule.addFactor(lhs[getTransposeLhs() ? batchRank : batchRank + 1],
                             FactorKind::Reduction);
  SmallVector<int64_t> lhsFactors(batch), rhsFactors, resultFactors(batch);
  lhsFactors.append(getTransposeLhs() ? SmallVector<int64_t>{k, m}
                                      : SmallVector<int64_t>{m, k});
  if (rhs.size() != 2)
    rhsFactors.append(batch);
  rhsFactors.append(getTransposeRhs() ? SmallVector<int64_t>{n, k}
                                      : SmallVector<int64_t>{k, n});
  resultFactors.append({m, n});
  rule.operandFactors = {lhsFactors, rhsFactors};
  rule.resultFactors = {resultFactors};
  return rule;
}

//===----------------------------------------------------------------------===//
// Neural-network layers
//===----------------------------------------------------------------------===//

ShardingRule SoftmaxOp::getShardingRule() {
  return rowwiseRule(1, 1, shapeOf(getInput()));
}

ShardingRule SoftmaxGradOp::getShardingRule() {
  return rowwiseRule(2, 1, shapeOf(getResultValue()));
}

ShardingRule LayerNormOp::getShardingRule() {
  return normRule(shapeOf(getInput()), 1, 2, 1, 0);
}

ShardingRule LayerNormGradOp::getShardingRule() {
  // Operands (input, weight, result_grad); results (input_grad,
  // weight_grad, bias_grad): the vector results sum over the rows.
  return normRule(shapeOf(getInput()), 2, 1, 1, 2);
}

ShardingRule RmsNormOp::getShardingRule() {
  return normRule(shapeOf(getInput()), 1, 1, 1, 0);
}

ShardingRule RmsNormGradOp::getShardingRule() {
  return normRule(shapeOf(getInput()), 2, 1, 1, 1);
}

ShardingRule EmbeddingOp::getShardingRule() {
  // Splitting the vocabulary leaves the result partial: each shard fills
  // the rows it holds and zeros elsewhere.
  ShardingRule rule;
  ArrayRef<int64_t> table = shapeOf(getTable());
  int64_t vocab = rule.addFactor(table[0], FactorKind::Reduction);
  int64_t features = rule.addFactor(table[1], FactorKind::Parallel);
  SmallVector<int64_t> ids =
      addFactors(rule, shapeOf(getIds()), FactorKind::Parallel);
  SmallVector<int64_t> result(ids);
  result.push_back(features);
  rule.operandFactors = {{vocab, features}, ids};
  rule.resultFactors = {result};
  return rule;
}

ShardingRule EmbeddingGradOp::getShardingRule() {
  // Token dimensions are summed away; the vocabulary can be split (each
  // shard keeps the rows it holds).
  ShardingRule rule;
  ArrayRef<int64_t> grad = shapeOf(getResultGrad());
  SmallVector<int64_t> tokens =
      addFactors(rule, shapeOf(getIds()), FactorKind::Reduction);
  int64_t features = rule.addFactor(grad.back(), FactorKind::Parallel);
  int64_t vocab = rule.addFactor(getNumEmbeddings(), FactorKind::Parallel);
  SmallVector<int64_t> gradFactors(tokens);
  gradFactors.push_back(features);
  rule.operandFactors = {tokens, gradFactors};
  rule.resultFactors = {{vocab, features}};
  // Scatter-adding rows is linear in them: partial rows, a partial table.
  rule.linearOperand = 1;
  return rule;
}

ShardingRule RopeOp::getShardingRule() {
  // The angle depends on the absolute position: a piece of the sequence
  // knows its offset from its place (localizeAttributes).
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(getInput());
  SmallVector<int64_t> factors = {
      rule.addFactor(shape[0], FactorKind::Parallel),
      rule.addFactor(shape[1], FactorKind::Parallel),
      rule.addFactor(shape[2], FactorKind::Parallel),
      rule.addFactor(shape[3], FactorKind::Whole)};
  rule.operandFactors = {factors};
  rule.resultFactors = {factors};
  return rule;
}

namespace {
/// Batch and heads parallel; the keys' sequence and the head dimension
/// whole. The queries' sequence may be split (context parallelism: each
/// piece knows its offset, localizeAttributes), which leaves the key and
/// value gradients partial. Query heads and kv heads share one factor of
/// size kv_heads: splitting both into contiguous blocks keeps every query
/// head with its kv head.
ShardingRule attentionRule(Value query, Value key, unsigned numOperands,
                           unsigned numResults, bool lastOperandIsQueryLike) {
  ShardingRule rule;
  ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key);
  int64_t batch = rule.addFactor(q[0], FactorKind::Parallel);
  int64_t querySeq = rule.addFactor(q[1], FactorKind::Parallel);
  int64_t keySeq = rule.addFactor(k[1], FactorKind::Whole);
  int64_t heads = rule.addFactor(std::gcd(q[2], k[2]), FactorKind::Parallel);
  int64_t dim = rule.addFactor(q[3], FactorKind::Whole);
  SmallVector<int64_t> queryFactors = {batch, querySeq, heads, dim};
  SmallVector<int64_t> keyFactors = {batch, keySeq, heads, dim};
  rule.operandFactors = {queryFactors, keyFactors, keyFactors};
  if (numOperands == 4 && lastOperandIsQueryLike)
    rule.operandFactors.push_back(queryFactors);
  rule.resultFactors = {queryFactors};
  if (numResults == 3)
    rule.resultFactors.append({keyFactors, keyFactors});
  return rule;
}
} // namespace

ShardingRule AttentionOp::getShardingRule() {
  return attentionRule(getQuery(), getKey(), 3, 1, false);
}

ShardingRule AttentionGradOp::getShardingRule() {
  return attentionRule(getQuery(), getKey(), 4, 3, true);
}

// Ring attention's blocks exist only in partitioned programs (the ring
// lowering makes them); batch and heads stay parallel, blocks whole.
namespace {
ShardingRule attentionBlockRule(Operation *op) {
  ShardingRule rule;
  ArrayRef<int64_t> q = shapeOf(op->getOperand(0)),
                    k = shapeOf(op->getOperand(1));
  int64_t batch = rule.addFactor(q[0], FactorKind::Parallel);
  int64_t seq = rule.addFactor(q[1], FactorKind::Whole);
  int64_t heads = rule.addFactor(std::gcd(q[2], k[2]), FactorKind::Parallel);
  int64_t dim = rule.addFactor(q[3], FactorKind::Whole);
  SmallVector<int64_t> rows = {batch, seq, heads, dim};
  SmallVector<int64_t> rowSums = {batch, heads, seq};
  auto factorsOf = [&](Value value) {
    return shapeOf(value).size() == 3 ? rowSums : rows;
  };
  for (Value operand : op->getOperands())
    rule.operandFactors.push_back(factorsOf(operand));
  for (Value result : op->getResults())
    rule.resultFactors.push_back(factorsOf(result));
  return rule;
}
} // namespace

ShardingRule AttentionBlockOp::getShardingRule() {
  return attentionBlockRule(getOperation());
}

ShardingRule AttentionMergeOp::getShardingRule() {
  return attentionBlockRule(getOperation());
}

ShardingRule AttentionBlockGradOp::getShardingRule() {
  return attentionBlockRule(getOperation());
}

// Every member is elementwise over the result's shape: the fused op's rule
// is theirs, each input's dimensions mapping to the result factor they
// broadcast into.
ShardingRule FusedElementwiseOp::getShardingRule() {
  return elementwiseRule(getInputs(), getResult());
}

ShardingRule PositionsOp::getShardingRule() {
  // Position ids know their place when split (localizeAttributes).
  ShardingRule rule;
  rule.resultFactors.push_back(
      addFactors(rule, shapeOf(getResult()), FactorKind::Parallel));
  return rule;
}

ShardingRule CrossEntropyOp::getShardingRule() {
  // Token dimensions sum away (the normalizer keeps the global count); a
  // split of the classes the op combines itself (vocabulary parallelism).
  ShardingRule rule;
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  SmallVector<int64_t> tokens =
      addFactors(rule, logits.drop_back(), FactorKind::Reduction);
  SmallVector<int64_t> logitFactors(tokens);
  logitFactors.push_back(rule.addFactor(logits.back(), FactorKind::Collective));
  rule.operandFactors = {logitFactors, tokens};
  rule.resultFactors = {{}};
  return rule;
}

ShardingRule CrossEntropyGradOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  SmallVector<int64_t> tokens =
      addFactors(rule, logits.drop_back(), FactorKind::Parallel);
  SmallVector<int64_t> logitFactors(tokens);
  logitFactors.push_back(rule.addFactor(logits.back(), FactorKind::Collective));
  rule.operandFactors = {logitFactors, tokens, {}};
  rule.resultFactors = {logitFactors};
  return rule;
}

//===----------------------------------------------------------------------===//
// Optimizers: elementwise over the parameter; the step is a scalar.
//===----------------------------------------------------------------------===//

ShardingRule AdamWOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> factors =
      addFactors(rule, shapeOf(getParam()), FactorKind::Parallel);
  rule.operandFactors = {factors, factors, factors, factors, {}};
  rule.resultFactors = {factors, factors, factors};
  rule.paddable = true;
  return rule;
}

ShardingRule SgdOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> factors =
      addFactors(rule, shapeOf(getParam()), FactorKind::Parallel);
  rule.operandFactors = {factors, factors};
  rule.resultFactors = {factors};
  rule.paddable = true;
  return rule;
}
