//===- AttentionOps.cpp - Rows of attention and ring attention's pieces ---===//
//
// Queries [batch, seq, heads, dim], keys and values [batch, seq, kv_heads,
// dim] (grouped-query attention: kv_heads divides heads). Ring attention's
// pieces (the queries' block against one block of keys, combined by
// log-sum-exp) exist only in partitioned programs.
//
//===----------------------------------------------------------------------===//

#include "../OpTable.h"

#include <numeric>

namespace trellis::optable {

namespace {

/// Queries [batch, seq, heads, dim], keys [batch, seq, kv_heads, dim] and
/// values shaped like the keys.
Diagnostic attentionRanks(const OpInstance &op) {
  TRELLIS_CHECK(expectRank(op, 0, "query [batch, seq, heads, dim]", 4));
  TRELLIS_CHECK(expectRank(op, 1, "key [batch, seq, kv_heads, dim]", 4));
  return expectSameShape(op, 2, "value", 1, "key");
}

/// The score's optional shaping: a sliding `window` (each query sees its
/// last `window` positions; causal only) and a `softcap` (scores become
/// softcap * tanh(score / softcap), Gemma 2's logit soft-capping).
Diagnostic attentionMask(const OpInstance &op) {
  if (op.has("window")) {
    int64_t window = op.integer("window");
    if (window < 1)
      return "expected window >= 1 (the positions each query sees), found " +
             text(window);
    if (op.has("causal") && !op.flag("causal"))
      return "expected causal attention with a sliding window (each query "
             "sees the window's positions up to its own), found causal = "
             "false";
  }
  if (op.has("softcap") && !(op.real("softcap") > 0))
    return "expected softcap > 0, found " + std::to_string(op.real("softcap"));
  return std::nullopt;
}

Diagnostic expectKvHeadsDividing(const Shape &q, const Shape &k) {
  if (k[2] == 0 || q[2] % k[2] != 0)
    return "expected kv heads (" + text(k[2]) + ") to divide query heads (" +
           text(q[2]) + ")";
  return std::nullopt;
}

Diagnostic attentionOperands(const OpInstance &op) {
  TRELLIS_CHECK(attentionRanks(op));
  TRELLIS_CHECK(attentionMask(op));
  const Shape &q = op.shape(0), &k = op.shape(1);
  // Queries split over mesh axes (context parallelism) are a piece of the
  // keys' sequence: one of the group's when it is known (the plan), some
  // whole fraction of it otherwise (the compiler's local types).
  bool split = op.has("axes");
  int64_t pieces = op.numAxes() ? op.groupSize() : 1;
  bool sequences = split && !op.numAxes() ? q[1] > 0 && k[1] % q[1] == 0
                                          : q[1] * pieces == k[1];
  if (q[0] != k[0] || !sequences || q[3] != k[3])
    return "expected key of shape [" + text(q[0]) + ", " + text(q[1] * pieces) +
           ", kv_heads, " + text(q[3]) + "] to match query " + formatShape(q) +
           (pieces > 1 ? " (a piece of " + text(pieces) + ")" : "") +
           ", found " + formatShape(k);
  return expectKvHeadsDividing(q, k);
}

/// Ring attention's blocks: queries [B, S, Hq, D] and keys and values
/// [B, S, Hkv, D] of one equal block of the sequence.
Diagnostic attentionBlockOperands(const OpInstance &op) {
  TRELLIS_CHECK(attentionRanks(op));
  TRELLIS_CHECK(attentionMask(op));
  const Shape &q = op.shape(0), &k = op.shape(1);
  if (q[0] != k[0] || q[1] != k[1] || q[3] != k[3])
    return "expected a key block of shape [" + text(q[0]) + ", " + text(q[1]) +
           ", kv_heads, " + text(q[3]) +
           "] (the queries' block length), found " + formatShape(k);
  return expectKvHeadsDividing(q, k);
}

/// The segment attribute saying which of an attention instruction's
/// optional operands it has: one count per operand group in the op's order,
/// the last two ALiBi's slopes and the sinks (MLIR's own property of ops
/// with several optional operands).
constexpr const char *kSegments = "operandSegmentSizes";

/// Which optional operands (ALiBi slopes, sinks) follow the `required`
/// ones: both [heads] in the query's element type, named by the segment
/// attribute when there are any.
Diagnostic attentionExtras(const OpInstance &op, size_t required) {
  size_t extras = op.numInputs() - required;
  if (!op.has(kSegments)) {
    if (extras == 0)
      return std::nullopt;
    return "expected " + std::string(kSegments) +
           " saying which of slopes and sinks the " + text(extras) +
           " operand(s) after the first " + text(required) + " are";
  }
  std::vector<int64_t> segments = op.ints(kSegments);
  bool wellFormed = segments.size() == required + 2;
  int64_t sum = 0;
  for (size_t i = 0; wellFormed && i < segments.size(); ++i) {
    wellFormed =
        i < required ? segments[i] == 1 : segments[i] == 0 || segments[i] == 1;
    sum += segments[i];
  }
  if (!wellFormed || sum != static_cast<int64_t>(op.numInputs()))
    return "expected " + std::string(kSegments) + " of " + text(required + 2) +
           " entries: " + text(required) +
           " ones, then 0 or 1 for slopes and for sinks, summing to the " +
           text(op.numInputs()) + " operands";
  const Shape heads = {op.shape(0)[2]};
  for (size_t i = required; i < op.numInputs(); ++i) {
    bool slopes = i == required && segments[required] == 1;
    const char *name = slopes ? "slopes" : "sinks";
    if (op.shape(i) != heads || op.input(i).element != op.input(0).element)
      return std::string("expected ") + name + " of shape " +
             formatShape(heads) + " (one per query head) in the query's " +
             elementTypeName(op.input(0).element) + ", found " +
             formatShape(op.shape(i)) + " (" +
             elementTypeName(op.input(i).element) + ")";
  }
  return std::nullopt;
}

/// Whether an instance has sinks (the last optional operand).
bool hasSinks(const OpInstance &op) {
  return op.has(kSegments) && op.ints(kSegments).back() == 1;
}

/// The sinks' gradient, [heads] like them (a grad op's fourth result).
void pushSinksGrad(const OpInstance &op, Results &out) {
  if (hasSinks(op))
    out.push_back({{op.shape(0)[2]}, op.input(0).element});
}

/// The log-sum-exp of attention rows, [batch, heads, seq] in f32, for the
/// queries (operand 0).
TensorType logSumExpType(const OpInstance &op) {
  const Shape &q = op.shape(0);
  return f32({q[0], q[2], q[1]});
}

Diagnostic expectLogSumExp(const OpInstance &op, size_t i,
                           const std::string &name) {
  TensorType expected = logSumExpType(op);
  if (op.shape(i) == expected.shape)
    return std::nullopt;
  return "expected " + name + " of shape " + formatShape(expected.shape) +
         " ([batch, heads, seq] of the result), found " +
         formatShape(op.shape(i));
}

/// Batch and heads parallel; the keys' sequence and the head dimension
/// whole. The queries' sequence may be split (context parallelism: each
/// piece knows its offset, localizeAttributes), which leaves the key and
/// value gradients partial. Query heads and kv heads share one factor of
/// size kv_heads: splitting both into contiguous blocks keeps every query
/// head with its kv head. Operands and results after (query, key, value)
/// are shaped like the queries, then like the keys; the [heads] ones
/// (slopes, sinks and the sinks' gradient, partial where batch or the
/// queries' sequence is split) have the heads factor alone.
ShardingRule attentionFactors(const OpInstance &op) {
  ShardingRule rule;
  const Shape &q = op.shape(0), &k = op.shape(1);
  int64_t batch = rule.addFactor(q[0], FactorKind::Parallel);
  int64_t querySeq = rule.addFactor(q[1], FactorKind::Parallel);
  int64_t keySeq = rule.addFactor(k[1], FactorKind::Whole);
  int64_t heads = rule.addFactor(std::gcd(q[2], k[2]), FactorKind::Parallel);
  int64_t dim = rule.addFactor(q[3], FactorKind::Whole);
  std::vector<int64_t> queryFactors = {batch, querySeq, heads, dim};
  std::vector<int64_t> keyFactors = {batch, keySeq, heads, dim};
  auto factorsOf = [&](const Shape &shape, const std::vector<int64_t> &rows) {
    return shape.size() == 1 ? std::vector<int64_t>{heads} : rows;
  };
  rule.operandFactors = {queryFactors, keyFactors, keyFactors};
  for (size_t i = 3; i < op.numInputs(); ++i)
    rule.operandFactors.push_back(factorsOf(op.shape(i), queryFactors));
  rule.resultFactors = {queryFactors};
  for (size_t i = 1; i < op.numResults(); ++i)
    rule.resultFactors.push_back(factorsOf(op.resultShape(i), keyFactors));
  return rule;
}

/// Ring attention's blocks: batch and heads parallel, blocks whole; the
/// log-sum-exps [batch, heads, seq] share the factors, the [heads] slopes,
/// sinks and sinks' gradient the heads factor.
ShardingRule attentionBlockFactors(const OpInstance &op) {
  ShardingRule rule;
  const Shape &q = op.shape(0), &k = op.shape(1);
  int64_t batch = rule.addFactor(q[0], FactorKind::Parallel);
  int64_t seq = rule.addFactor(q[1], FactorKind::Whole);
  int64_t heads = rule.addFactor(std::gcd(q[2], k[2]), FactorKind::Parallel);
  int64_t dim = rule.addFactor(q[3], FactorKind::Whole);
  std::vector<int64_t> rows = {batch, seq, heads, dim};
  std::vector<int64_t> rowSums = {batch, heads, seq};
  auto factorsOf = [&](const Shape &shape) {
    return shape.size() == 1   ? std::vector<int64_t>{heads}
           : shape.size() == 3 ? rowSums
                               : rows;
  };
  for (size_t i = 0; i < op.numInputs(); ++i)
    rule.operandFactors.push_back(factorsOf(op.shape(i)));
  for (size_t i = 0; i < op.numResults(); ++i)
    rule.resultFactors.push_back(factorsOf(op.resultShape(i)));
  return rule;
}

/// Multiply-adds of q k^T and p v over every head (4 B Hq S_q S_k D),
/// times `products` / 2: 2 for the forward; 5 for a backward, which
/// recomputes q k^T, then forms dV, dP, dQ and dK. Causal attention is
/// priced whole (the planner halves it); a sliding window W shorter than
/// the S keys shows W S - W (W - 1) / 2 of the causal S (S + 1) / 2
/// pairs, which scales the FLOPs by that share.
CostRule attentionCost(double products) {
  return [products](const OpInstance &op) {
    const Shape &q = op.shape(0), &k = op.shape(1);
    OpCost cost = elementwiseCost(op, 0);
    cost.flops = products / 2 * 4.0 * q[0] * q[2] * q[1] * k[1] * q[3];
    double keys = static_cast<double>(k[1]);
    double window = static_cast<double>(op.integer("window"));
    if (window > 0 && window < keys)
      cost.flops *=
          (window * keys - window * (window - 1) / 2) / (keys * (keys + 1) / 2);
    return cost;
  };
}

OpParameters attentionParameters(const OpInstance &op) {
  AttentionParameters parameters;
  parameters.scale = op.real("scale");
  parameters.causal = !op.has("causal") || op.flag("causal");
  parameters.window = op.integer("window");
  parameters.softcap = op.real("softcap");
  parameters.chunks = op.integer("chunks");
  parameters.shift = op.integer("shift");
  if (op.has(kSegments)) {
    std::vector<int64_t> segments = op.ints(kSegments);
    int64_t required = static_cast<int64_t>(segments.size()) - 2;
    if (required > 0 && segments[required] == 1)
      parameters.slopesOperand = required;
    if (required > 0 && segments[required + 1] == 1)
      parameters.sinksOperand = required + segments[required];
  }
  return parameters;
}

/// `operands`, then ALiBi's slopes and the sinks, each optional.
std::vector<OperandSpec> withExtras(std::vector<OperandSpec> operands) {
  operands.push_back({"slopes", OperandKind::Float, /*optional=*/true});
  operands.push_back({"sinks", OperandKind::Float, /*optional=*/true});
  return operands;
}

} // namespace

void addAttentionOps(TableBuilder &table) {
  using K = AttrKind;
  const std::vector<AttrSpec> attrs = {{"scale", K::Real, true},
                                       {"causal", K::Bool, false},
                                       kOptionalAxes,
                                       kChunks,
                                       {"window", K::Int, false},
                                       {"softcap", K::Real, false},
                                       {kSegments, K::Ints, false}};
  table.family(OpFamily::Attention, attentionParameters);
  table
      .add("attention", withExtras({{"query"}, {"key"}, {"value"}}), 1, attrs,
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(attentionOperands(op));
             TRELLIS_CHECK(attentionExtras(op, 3));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .member(AttentionPiece::Whole)
      .factors(attentionFactors)
      .cost(attentionCost(2));
  table
      .add("attention_grad",
           withExtras({{"query"}, {"key"}, {"value"}, {"result_grad"}}), 4,
           attrs,
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(attentionOperands(op));
             TRELLIS_CHECK(expectSameShape(op, 3, "result_grad", 0, "query"));
             TRELLIS_CHECK(attentionExtras(op, 4));
             out.push_back(op.input(0));
             out.push_back(op.input(1));
             out.push_back(op.input(2));
             pushSinksGrad(op, out);
             return std::nullopt;
           })
      .member(AttentionPiece::Whole)
      .gradient()
      .optionalResults(1)
      .factors(attentionFactors)
      .cost(attentionCost(5));

  const std::vector<AttrSpec> blockAttrs = {{"scale", K::Real, true},
                                            {"causal", K::Bool, false},
                                            kOptionalAxes,
                                            {"shift", K::Int, true},
                                            kChunks,
                                            {"window", K::Int, false},
                                            {"softcap", K::Real, false},
                                            {kSegments, K::Ints, false}};
  table
      .add("attention_block", withExtras({{"query"}, {"key"}, {"value"}}), 2,
           blockAttrs,
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(attentionBlockOperands(op));
             TRELLIS_CHECK(attentionExtras(op, 3));
             out.push_back(op.input(0));
             out.push_back(logSumExpType(op));
             return std::nullopt;
           })
      .member(AttentionPiece::Block)
      .factors(attentionBlockFactors)
      .cost(attentionCost(2));
  table
      .add("attention_merge",
           {{"result"},
            {"log_sum_exp", OperandKind::Float32},
            {"other"},
            {"other_log_sum_exp", OperandKind::Float32}},
           2, {},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(
                 expectRank(op, 0, "result [batch, seq, heads, dim]", 4));
             TRELLIS_CHECK(expectSameShape(op, 2, "other", 0, "result"));
             TRELLIS_CHECK(expectLogSumExp(op, 1, "log_sum_exp"));
             TRELLIS_CHECK(expectLogSumExp(op, 3, "other_log_sum_exp"));
             out.push_back(op.input(0));
             out.push_back(op.input(1));
             return std::nullopt;
           })
      .member(AttentionPiece::Merge)
      .factors(attentionBlockFactors)
      .flopsPerElement(6);
  table
      .add("attention_block_grad",
           withExtras({{"query"},
                       {"key"},
                       {"value"},
                       {"result"},
                       {"log_sum_exp", OperandKind::Float32},
                       {"result_grad"}}),
           4, blockAttrs,
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(attentionBlockOperands(op));
             TRELLIS_CHECK(expectSameShape(op, 3, "result", 0, "query"));
             TRELLIS_CHECK(expectLogSumExp(op, 4, "log_sum_exp"));
             TRELLIS_CHECK(expectSameShape(op, 5, "result_grad", 0, "query"));
             TRELLIS_CHECK(attentionExtras(op, 6));
             out.push_back(op.input(0));
             out.push_back(op.input(1));
             out.push_back(op.input(2));
             pushSinksGrad(op, out);
             return std::nullopt;
           })
      .member(AttentionPiece::Block)
      .gradient()
      .optionalResults(1)
      .factors(attentionBlockFactors)
      .cost(attentionCost(5));
}

} // namespace trellis::optable
