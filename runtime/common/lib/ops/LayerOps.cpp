//===- LayerOps.cpp - Rows of matmul, row-wise ops, norms, embeddings... --===//
//
// Activations are laid out [batch, sequence, features]; rope takes
// [batch, sequence, heads, dim]. FLOP counts follow the usual conventions
// (a multiply-add is 2); transcendental functions count as a few each.
//
//===----------------------------------------------------------------------===//

#include "../OpTable.h"

namespace trellis::optable {

namespace {

/// An embedding's padding row is a row of the full table: an id >= 0 (the
/// table may be a vocabulary shard, so its size bounds nothing here).
Diagnostic expectPaddingRow(const OpInstance &op) {
  if (op.has("padding_idx") && op.integer("padding_idx") < 0)
    return "expected padding_idx >= 0, found " +
           text(op.integer("padding_idx"));
  return std::nullopt;
}

Diagnostic matmulRule(const OpInstance &op, Results &out) {
  const Shape &lhs = op.shape(0), &rhs = op.shape(1);
  if (lhs.size() < 2 || rhs.size() < 2)
    return "expected operands of rank >= 2, found " + formatShape(lhs) +
           " and " + formatShape(rhs);
  if (rhs.size() != 2 && rhs.size() != lhs.size())
    return "expected rhs of rank 2 or " + text(lhs.size()) +
           " (the rank of lhs), found " + formatShape(rhs);
  Shape batch(lhs.begin(), lhs.end() - 2);
  if (rhs.size() != 2 && Shape(rhs.begin(), rhs.end() - 2) != batch)
    return "expected rhs batch dimensions " + formatShape(batch) + ", found " +
           formatShape(Shape(rhs.begin(), rhs.end() - 2));
  bool tl = op.flag("transpose_lhs"), tr = op.flag("transpose_rhs");
  int64_t m = lhs[lhs.size() - (tl ? 1 : 2)];
  int64_t k = lhs[lhs.size() - (tl ? 2 : 1)];
  int64_t rk = rhs[rhs.size() - (tr ? 1 : 2)];
  int64_t n = rhs[rhs.size() - (tr ? 2 : 1)];
  if (k != rk)
    return "contracting sizes differ: lhs " + formatShape(lhs) + " has " +
           text(k) + ", rhs " + formatShape(rhs) + " has " + text(rk);
  Shape result = batch;
  result.push_back(m);
  result.push_back(n);
  out.push_back(like(op, 0, result));
  // The fp32 sums unrounded (a weight gradient's product, written as its
  // f32 gradient).
  if (op.flag("f32_result"))
    out.back().element = ElementType::F32;
  return std::nullopt;
}

/// Batch dimensions, M and N parallel; K a reduction.
ShardingRule matmulFactors(const OpInstance &op) {
  ShardingRule rule;
  const Shape &lhs = op.shape(0), &rhs = op.shape(1);
  const Shape &result = op.resultShape(0);
  bool tl = op.flag("transpose_lhs"), tr = op.flag("transpose_rhs");
  size_t batchRank = lhs.size() - 2;
  std::vector<int64_t> batch = rule.addFactors(
      Shape(lhs.begin(), lhs.begin() + batchRank), FactorKind::Parallel);
  int64_t m = rule.addFactor(result[batchRank], FactorKind::Parallel);
  int64_t n = rule.addFactor(result[batchRank + 1], FactorKind::Parallel);
  int64_t k = rule.addFactor(lhs[tl ? batchRank : batchRank + 1],
                             FactorKind::Reduction);
  std::vector<int64_t> lhsFactors(batch), rhsFactors, resultFactors(batch);
  lhsFactors.insert(lhsFactors.end(), {tl ? k : m, tl ? m : k});
  if (rhs.size() != 2)
    rhsFactors = batch;
  rhsFactors.insert(rhsFactors.end(), {tr ? n : k, tr ? k : n});
  resultFactors.insert(resultFactors.end(), {m, n});
  rule.operandFactors = {lhsFactors, rhsFactors};
  rule.resultFactors = {resultFactors};
  return rule;
}

/// 2 M N K per product; the operands read and the result written once.
OpCost matmulCost(const OpInstance &op) {
  const Shape &lhs = op.shape(0);
  int64_t k = lhs[lhs.size() - (op.flag("transpose_lhs") ? 2 : 1)];
  OpCost cost = elementwiseCost(op, 0);
  cost.flops = 2.0 * elementCount(op.resultShape(0)) * k;
  return cost;
}

/// A normalization [..., E] with per-feature vectors [E] (weight, bias):
/// rows parallel, features whole. Its gradient's vector results sum over
/// the rows, so splitting the rows leaves them partial. Operand order:
/// the input, the vectors, then the result gradient.
ShardingRule normFactors(const OpInstance &op, size_t vectorOperands,
                         size_t vectorResults) {
  ShardingRule rule;
  std::vector<int64_t> rows = addRowFactors(rule, op.shape(0));
  std::vector<int64_t> vector = {rows.back()};
  rule.operandFactors.push_back(rows);
  rule.operandFactors.insert(rule.operandFactors.end(), vectorOperands, vector);
  rule.operandFactors.insert(rule.operandFactors.end(),
                             op.numInputs() - 1 - vectorOperands, rows);
  rule.resultFactors.push_back(rows);
  rule.resultFactors.insert(rule.resultFactors.end(), vectorResults, vector);
  return rule;
}

/// The norm family: layer_norm (weight and bias) and rms_norm (weight), and
/// their gradients, which take (input, weight, result_grad) and give the
/// input's gradient and each vector's.
void addNorm(TableBuilder &table, const std::string &name, NormKind kind,
             bool hasBias, double forwardFlops, double gradientFlops) {
  const std::vector<AttrSpec> attrs = {{"epsilon", AttrKind::Real, true}};
  std::vector<OperandSpec> operands = {kInput, {"weight"}};
  if (hasBias)
    operands.push_back({"bias"});
  size_t vectors = hasBias ? 2 : 1;
  table
      .add(name, operands, 1, attrs,
           [hasBias](const OpInstance &op, Results &out) -> Diagnostic {
             if (op.shape(0).empty())
               return "expected an input of rank >= 1, found []";
             TRELLIS_CHECK(expectPositive(op, "epsilon"));
             TRELLIS_CHECK(expectFeatureVector(op, 1, "weight"));
             if (hasBias)
               TRELLIS_CHECK(expectFeatureVector(op, 2, "bias"));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .member(kind)
      .factors([vectors](const OpInstance &op) {
        return normFactors(op, vectors, 0);
      })
      .flopsPerElement(forwardFlops);
  table
      .add(name + "_grad", {kInput, {"weight"}, {"result_grad"}}, 1 + vectors,
           attrs,
           [hasBias](const OpInstance &op, Results &out) -> Diagnostic {
             if (op.shape(0).empty())
               return "expected an input of rank >= 1, found []";
             TRELLIS_CHECK(expectPositive(op, "epsilon"));
             TRELLIS_CHECK(expectFeatureVector(op, 1, "weight"));
             TRELLIS_CHECK(expectSameShape(op, 2, "result_grad", 0, "input"));
             out.push_back(op.input(0));
             out.push_back(op.input(1));
             if (hasBias)
               out.push_back(op.input(1));
             return std::nullopt;
           })
      .gradient()
      .member(kind)
      .factors([vectors](const OpInstance &op) {
        return normFactors(op, 1, vectors);
      })
      .cost([gradientFlops](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = gradientFlops * elementCount(op.shape(0));
        return cost;
      });
}

Diagnostic targetsOperand(const OpInstance &op) {
  const Shape &logits = op.shape(0), &targets = op.shape(1);
  Shape expected =
      logits.empty() ? logits : Shape(logits.begin(), logits.end() - 1);
  if (logits.empty() || expected != targets)
    return "expected targets of shape " + formatShape(expected) + " (logits " +
           formatShape(logits) + " without the class dimension), found " +
           formatShape(targets);
  if (op.integer("normalizer") < 0)
    return "expected normalizer >= 0, found " + text(op.integer("normalizer"));
  return std::nullopt;
}

/// Token dimensions of the logits `tokenKind`; a split of the classes the
/// op combines itself (vocabulary parallelism).
std::vector<int64_t> logitFactors(ShardingRule &rule, const Shape &logits,
                                  FactorKind tokenKind,
                                  std::vector<int64_t> &tokens) {
  tokens = rule.addFactors(Shape(logits.begin(), logits.end() - 1), tokenKind);
  std::vector<int64_t> factors(tokens);
  factors.push_back(rule.addFactor(logits.back(), FactorKind::Collective));
  return factors;
}

/// Flops of a cross-entropy over `logits` and its gradient alike.
OpCost crossEntropyCost(const OpInstance &op) {
  OpCost cost = elementwiseCost(op, 0);
  cost.flops = 4.0 * elementCount(op.shape(0));
  return cost;
}

OpParameters matmulParameters(const OpInstance &op) {
  MatmulParameters parameters;
  parameters.transposeLhs = op.flag("transpose_lhs");
  parameters.transposeRhs = op.flag("transpose_rhs");
  parameters.f32Result = op.flag("f32_result");
  parameters.first = op.flag("first");
  return parameters;
}

OpParameters normParameters(const OpInstance &op) {
  return NormParameters{op.real("epsilon")};
}

OpParameters embeddingParameters(const OpInstance &op) {
  EmbeddingParameters parameters;
  parameters.vocabOffset = op.integer("vocab_offset");
  if (op.has("padding_idx"))
    parameters.paddingIndex = op.integer("padding_idx");
  return parameters;
}

OpParameters positionParameters(const OpInstance &op) {
  PositionParameters parameters;
  parameters.frequencies = op.reals("frequencies");
  parameters.inverse = op.flag("inverse");
  parameters.interleaved = op.flag("interleaved");
  parameters.chunks = op.integer("chunks");
  return parameters;
}

OpParameters lossParameters(const OpInstance &op) {
  return LossParameters{op.integer("normalizer")};
}

} // namespace

void addLayerOps(TableBuilder &table) {
  using K = AttrKind;
  table.family(OpFamily::Matmul, matmulParameters);
  table
      .add("matmul", {{"lhs"}, {"rhs"}}, 1,
           {{"transpose_lhs", K::Bool, false},
            {"transpose_rhs", K::Bool, false},
            {"f32_result", K::Bool, false}},
           matmulRule)
      .factors(matmulFactors)
      .cost(matmulCost);
  // A matmul whose product is added into its step total over the
  // micro-batches (graph.microbatch_sum of a graph.matmul, made by
  // -trellis-fuse-gradient-accumulation): the total is f32 whatever the
  // operands' float type, and each micro-batch's product goes into it
  // unrounded. The runtime sets `first` on the step's first product (which
  // writes the total instead of adding to it). It reads the total it adds
  // to.
  OpEffects accumulates;
  accumulates.accumulates = true;
  table
      .add("matmul_accumulate", {{"lhs"}, {"rhs"}}, 1,
           {{"transpose_lhs", K::Bool, false},
            {"transpose_rhs", K::Bool, false},
            {"first", K::Bool, false}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(matmulRule(op, out));
             out.back().element = ElementType::F32;
             return std::nullopt;
           })
      .factors(matmulFactors)
      .cost([](const OpInstance &op) {
        OpCost cost = matmulCost(op);
        cost.bytesRead += tensorBytes(op.result(0));
        return cost;
      })
      .effects(accumulates);

  // The row-wise family: softmax over the last dimension, and its
  // gradient from the softmax's result and the result's gradient.
  table.family(OpFamily::Rowwise);
  table.add("softmax", {kInput}, 1, {}, sameAsInputRule)
      .factors(rowwiseFactors)
      .flopsPerElement(5);
  table
      .add("softmax_grad", {{"result_value"}, {"result_grad"}}, 1, {},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(
                 expectSameShape(op, 1, "result_grad", 0, "result_value"));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .gradient()
      .factors(rowwiseFactors)
      .flopsPerElement(4);

  table.family(OpFamily::Norm, normParameters);
  addNorm(table, "layer_norm", NormKind::Layer, /*hasBias=*/true, 8, 12);
  addNorm(table, "rms_norm", NormKind::Rms, /*hasBias=*/false, 5, 9);

  // Splitting the vocabulary leaves the lookup partial: each shard fills
  // the rows it holds and zeros elsewhere. It reads only the selected rows.
  table.family(OpFamily::Embedding, embeddingParameters);
  table
      .add("embedding", {{"table"}, {"ids", OperandKind::Index}}, 1,
           {{"vocab_offset", K::Int, false},
            kOptionalAxes,
            {"padding_idx", K::Int, false}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(expectRank(op, 0, "table", 2));
             TRELLIS_CHECK(expectPaddingRow(op));
             Shape shape = op.shape(1);
             shape.push_back(op.shape(0)[1]);
             out.push_back(like(op, 0, shape));
             return std::nullopt;
           })
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        const Shape &table = op.shape(0);
        int64_t vocab = rule.addFactor(table[0], FactorKind::Reduction);
        int64_t features = rule.addFactor(table[1], FactorKind::Parallel);
        std::vector<int64_t> ids =
            rule.addFactors(op.shape(1), FactorKind::Parallel);
        std::vector<int64_t> result(ids);
        result.push_back(features);
        rule.operandFactors = {{vocab, features}, ids};
        rule.resultFactors = {result};
        return rule;
      })
      .cost([](const OpInstance &op) {
        OpCost cost;
        cost.bytesRead = tensorBytes(op.input(1)) + tensorBytes(op.result(0));
        cost.bytesWritten = tensorBytes(op.result(0));
        return cost;
      });
  // Token dimensions sum away; the vocabulary can be split (each shard
  // keeps the rows it holds). Scatter-adding rows is linear in them:
  // partial rows give a partial table.
  table
      .add("embedding_grad", {{"ids", OperandKind::Index}, {"result_grad"}}, 1,
           {{"num_embeddings", K::Int, true},
            {"vocab_offset", K::Int, false},
            kOptionalAxes,
            {"padding_idx", K::Int, false}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             const Shape &ids = op.shape(0), &grad = op.shape(1);
             if (grad.size() != ids.size() + 1 ||
                 Shape(grad.begin(), grad.end() - 1) != ids)
               return "expected result_grad of shape ids " + formatShape(ids) +
                      " + [features], found " + formatShape(grad);
             int64_t rows = op.integer("num_embeddings");
             if (rows < 1 || rows > (int64_t(1) << 32))
               return "expected num_embeddings in [1, 2^32], found " +
                      text(rows);
             TRELLIS_CHECK(expectPaddingRow(op));
             out.push_back(like(op, 1, {rows, grad.back()}));
             return std::nullopt;
           })
      .gradient()
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        const Shape &grad = op.shape(1);
        std::vector<int64_t> tokens =
            rule.addFactors(op.shape(0), FactorKind::Reduction);
        int64_t features = rule.addFactor(grad.back(), FactorKind::Parallel);
        int64_t vocab =
            rule.addFactor(op.resultShape(0)[0], FactorKind::Parallel);
        std::vector<int64_t> gradFactors(tokens);
        gradFactors.push_back(features);
        rule.operandFactors = {tokens, gradFactors};
        rule.resultFactors = {{vocab, features}};
        rule.linearOperand = 1;
        return rule;
      })
      .cost([](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = static_cast<double>(elementCount(op.shape(1)));
        return cost;
      });

  // The angle depends on the absolute position: a piece of the sequence
  // knows its offset from its place (the compiler's localizeAttributes).
  table.family(OpFamily::Position, positionParameters);
  table
      .add("rope", {kInput}, 1,
           {{"frequencies", K::Reals, true},
            {"inverse", K::Bool, false},
            {"interleaved", K::Bool, false},
            kOptionalAxes,
            kChunks},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(
                 expectRank(op, 0, "input [batch, seq, heads, dim]", 4));
             int64_t dim = op.shape(0).back();
             if (dim % 2 != 0)
               return "expected an even head dimension, found " + text(dim);
             size_t frequencies = op.reals("frequencies").size();
             if (static_cast<int64_t>(frequencies) != dim / 2)
               return "expected " + text(dim / 2) +
                      " frequencies (half the head dimension), found " +
                      text(frequencies);
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .member(PositionKind::Rope)
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        const Shape &shape = op.shape(0);
        std::vector<int64_t> factors = {
            rule.addFactor(shape[0], FactorKind::Parallel),
            rule.addFactor(shape[1], FactorKind::Parallel),
            rule.addFactor(shape[2], FactorKind::Parallel),
            rule.addFactor(shape[3], FactorKind::Whole)};
        rule.operandFactors = {factors};
        rule.resultFactors = {factors};
        return rule;
      })
      .flopsPerElement(6);
  // Position ids know their place when split (localizeAttributes).
  table
      .add("positions", {}, 1,
           {{"length", K::Int, true}, kChunks, kOptionalAxes},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             int64_t length = op.integer("length");
             if (length < 0)
               return "expected length >= 0, found " + text(length);
             out.push_back({{length}, ElementType::I32});
             return std::nullopt;
           })
      .member(PositionKind::Positions)
      .factors(resultFactors)
      .flopsPerElement(0);

  // The loss: token dimensions sum away (the normalizer keeps the global
  // count); fp32 inside, from logits of any float dtype.
  OpEffects combinesOverAxes;
  combinesOverAxes.reducesOverAxes = true;
  table.family(OpFamily::Loss, lossParameters);
  table
      .add("cross_entropy", {{"logits"}, {"targets", OperandKind::Index}}, 1,
           {{"normalizer", K::Int, false}, kOptionalAxes},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(targetsOperand(op));
             out.push_back(f32({}));
             return std::nullopt;
           })
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        std::vector<int64_t> tokens;
        std::vector<int64_t> logits =
            logitFactors(rule, op.shape(0), FactorKind::Reduction, tokens);
        rule.operandFactors = {logits, tokens};
        rule.resultFactors = {{}};
        return rule;
      })
      .cost(crossEntropyCost)
      .precision(PrecisionPolicy::Float32)
      .effects(combinesOverAxes);
  table
      .add("cross_entropy_grad",
           {{"logits"},
            {"targets", OperandKind::Index},
            {"loss_grad", OperandKind::Float32}},
           1, {{"normalizer", K::Int, false}, kOptionalAxes},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(targetsOperand(op));
             if (!op.shape(2).empty())
               return "expected a scalar loss_grad, found " +
                      formatShape(op.shape(2));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .gradient()
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        std::vector<int64_t> tokens;
        std::vector<int64_t> logits =
            logitFactors(rule, op.shape(0), FactorKind::Parallel, tokens);
        rule.operandFactors = {logits, tokens, {}};
        rule.resultFactors = {logits};
        return rule;
      })
      .cost(crossEntropyCost)
      .precision(PrecisionPolicy::Float32)
      .effects(combinesOverAxes);
}

} // namespace trellis::optable
