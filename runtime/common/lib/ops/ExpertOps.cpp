//===- ExpertOps.cpp - Rows of mixture-of-experts routing and experts -----===//
//
// A mixture-of-experts layer routes each token to `top_k` of E experts
// (moe_route), runs each of its k slots through its expert's weights
// (expert_matmul, once per projection) and sums the slots weighted by the
// router (mul and reduce_sum). Tokens are the leading dimensions [...];
// slots stay in token order, [..., k, features]: row (t, j) depends on
// token t alone, so any split of the tokens is exact. The kernels sort
// the slots by expert themselves (a counting sort, stable: token-major,
// then slot) and run one matrix product per expert over its rows; only
// those row ranges depend on the data, never a shape or the memory plan.
//
//===----------------------------------------------------------------------===//

#include "../OpTable.h"

namespace trellis::optable {

namespace {

/// The router's attributes: how many experts each token takes, how scores
/// are made from logits, whether the chosen weights are renormalized to
/// sum to one, and a factor on them (DeepSeek's routed_scaling_factor).
const std::vector<AttrSpec> kRouteAttrs = {{"top_k", AttrKind::Int, true},
                                           {"scoring", AttrKind::String, false},
                                           {"normalize", AttrKind::Bool, false},
                                           {"scaling", AttrKind::Real, false}};

/// The forward router's attributes besides: DeepSeek's grouped routing
/// (experts in `groups` contiguous groups, a token's experts from its
/// `top_groups` best groups, a group ranked by the sum of its `group_top`
/// highest: 2, DeepSeek-V3's, or 1, DeepSeek-V2's).
std::vector<AttrSpec> forwardRouteAttrs() {
  std::vector<AttrSpec> attrs = kRouteAttrs;
  attrs.push_back({"groups", AttrKind::Int, false});
  attrs.push_back({"top_groups", AttrKind::Int, false});
  attrs.push_back({"group_top", AttrKind::Int, false});
  return attrs;
}

/// logits [..., E]: 1 <= top_k <= E, scoring softmax (the default) or
/// sigmoid, a positive scaling when given.
Diagnostic routeOperands(const OpInstance &op) {
  const Shape &logits = op.shape(0);
  if (logits.empty())
    return "expected router logits [..., experts], found []";
  int64_t k = op.integer("top_k"), experts = logits.back();
  if (k < 1 || k > experts)
    return "expected top_k in [1, " + text(experts) +
           "] (the expert count), found " + text(k);
  std::string scoring = op.text("scoring");
  if (!scoring.empty() && scoring != "softmax" && scoring != "sigmoid")
    return "expected scoring \"softmax\" or \"sigmoid\", found \"" + scoring +
           "\"";
  if (op.has("scaling") && !(op.real("scaling") > 0))
    return "expected scaling > 0, found " + std::to_string(op.real("scaling"));
  if (op.has("groups") != op.has("top_groups"))
    return std::string("expected groups and top_groups together, found ") +
           (op.has("groups") ? "groups alone" : "top_groups alone");
  if (op.has("group_top") && !op.has("groups"))
    return std::string("expected group_top with groups");
  if (!op.has("groups"))
    return std::nullopt;
  int64_t groups = op.integer("groups"), kept = op.integer("top_groups");
  int64_t top = op.has("group_top") ? op.integer("group_top") : 2;
  if (top != 1 && top != 2)
    return "expected group_top 1 or 2 (a group ranked by its highest or "
           "the sum of its two highest), found " +
           text(top);
  // A group's score is the sum of its `top` highest: that many experts at
  // least.
  if (groups < 1 || experts % groups != 0 || experts / groups < top)
    return "expected groups dividing the " + text(experts) +
           " experts into groups of " + (top == 2 ? "two" : "one") +
           " or more, found " + text(groups);
  if (kept < 1 || kept > groups)
    return "expected top_groups in [1, " + text(groups) + "], found " +
           text(kept);
  if (k > kept * (experts / groups))
    return "expected top_k (" + text(k) + ") at most the " +
           text(kept * (experts / groups)) + " experts of top_groups groups";
  return std::nullopt;
}

/// moe_route's optional score bias: [E] (f32, the operand's kind).
Diagnostic routeBias(const OpInstance &op) {
  if (op.numInputs() < 2)
    return std::nullopt;
  Shape expected = {op.shape(0).back()};
  if (op.shape(1) != expected)
    return "expected bias of shape " + formatShape(expected) +
           " (one per expert), found " + formatShape(op.shape(1));
  return std::nullopt;
}

/// The tokens' shape: logits without the expert dimension.
Shape tokenShape(const Shape &logits) {
  return Shape(logits.begin(), logits.end() - 1);
}

/// Tokens parallel; the experts whole (top-k needs every score); the slots
/// whole (they are the top-k's order).
ShardingRule routeFactors(const OpInstance &op) {
  ShardingRule rule;
  const Shape &logits = op.shape(0);
  std::vector<int64_t> tokens =
      rule.addFactors(tokenShape(logits), FactorKind::Parallel);
  int64_t experts = rule.addFactor(logits.back(), FactorKind::Whole);
  int64_t slots = rule.addFactor(op.integer("top_k"), FactorKind::Whole);
  std::vector<int64_t> logitFactors(tokens), slotFactors(tokens);
  logitFactors.push_back(experts);
  slotFactors.push_back(slots);
  rule.operandFactors = {logitFactors};
  // moe_route (two results): weights and ids per slot, its bias per
  // expert; moe_route_grad: ids and weights' gradient in, the logits'
  // gradient out.
  bool forward = op.numResults() == 2;
  for (size_t i = 1; i < op.numInputs(); ++i)
    rule.operandFactors.push_back(forward ? std::vector<int64_t>{experts}
                                          : slotFactors);
  for (size_t i = 0; i < op.numResults(); ++i)
    rule.resultFactors.push_back(forward ? slotFactors : logitFactors);
  return rule;
}

/// The experts operand [..., k] of an expert op at `index`: ids, rank >= 1.
Diagnostic expectSlots(const OpInstance &op, size_t index) {
  if (op.shape(index).empty())
    return "expected experts [..., top_k], found []";
  return std::nullopt;
}

/// Whether an expert op's `lhs` has one row per token ([..., K], each
/// token's row feeding its k slots) rather than one per slot ([..., k,
/// K]); or what was expected.
Diagnostic lhsRows(const OpInstance &op, size_t lhsIndex, size_t slotsIndex,
                   bool &perToken) {
  const Shape &lhs = op.shape(lhsIndex), &slots = op.shape(slotsIndex);
  Shape tokens = tokenShape(slots);
  perToken =
      lhs.size() == slots.size() && Shape(lhs.begin(), lhs.end() - 1) == tokens;
  bool perSlot = lhs.size() == slots.size() + 1 &&
                 Shape(lhs.begin(), lhs.end() - 1) == slots;
  if (perToken || perSlot)
    return std::nullopt;
  return "expected lhs of shape " + formatShape(tokens) +
         " + [K] (a row per "
         "token) or " +
         formatShape(slots) + " + [K] (a row per slot), found " +
         formatShape(lhs);
}

/// An expert weight [E, K, N] ([E, N, K] with transpose_rhs): K and N.
void weightSizes(const Shape &weight, bool transposed, int64_t &k, int64_t &n) {
  k = weight[transposed ? 2 : 1];
  n = weight[transposed ? 1 : 2];
}

/// An expert product's `dispatch`: "gather" (the default: operands whole
/// over `axes`, the result partial) or "all_to_all" (operands and result
/// this rank's own slots; the kernel exchanges the routed rows itself).
Diagnostic checkDispatch(const OpInstance &op) {
  std::string dispatch = op.text("dispatch");
  if (dispatch.empty() || dispatch == "gather")
    return std::nullopt;
  if (dispatch != "all_to_all")
    return "expected dispatch \"gather\" or \"all_to_all\", found \"" +
           dispatch + "\"";
  if (!op.has("axes"))
    return std::string("expected axes with dispatch \"all_to_all\" (the "
                       "ranks the experts are split over)");
  return std::nullopt;
}

/// The experts' factor kind with `axes`: split (the rank's range), unless
/// the op exchanges the rows itself, which leaves its values local.
FactorKind splitExpertKind(const OpInstance &op, FactorKind split) {
  if (!op.has("axes") || op.text("dispatch") == "all_to_all")
    return FactorKind::Whole;
  return split;
}

/// Token dimensions, then the slot, the contracted K and the produced N
/// of an expert product, and the experts: whole, unless the op has `axes`
/// (expert parallelism: the rank holds a range of the experts, the one at
/// its place along them).
struct ExpertFactors {
  std::vector<int64_t> tokens;
  int64_t slot, k, n, experts;
};

ExpertFactors addExpertFactors(ShardingRule &rule, const Shape &slots,
                               int64_t experts, int64_t k, int64_t n,
                               FactorKind rowKind, FactorKind expertKind) {
  ExpertFactors factors;
  factors.tokens = rule.addFactors(tokenShape(slots), rowKind);
  factors.slot = rule.addFactor(slots.back(), rowKind);
  factors.k =
      rule.addFactor(k, rowKind == FactorKind::Parallel ? FactorKind::Reduction
                                                        : FactorKind::Parallel);
  factors.n = rule.addFactor(n, FactorKind::Parallel);
  factors.experts = rule.addFactor(experts, expertKind);
  return factors;
}

std::vector<int64_t> lhsFactors(const ExpertFactors &f, bool perToken) {
  std::vector<int64_t> factors(f.tokens);
  if (!perToken)
    factors.push_back(f.slot);
  factors.push_back(f.k);
  return factors;
}

std::vector<int64_t> weightFactors(const ExpertFactors &f, bool transposed) {
  return transposed ? std::vector<int64_t>{f.experts, f.n, f.k}
                    : std::vector<int64_t>{f.experts, f.k, f.n};
}

std::vector<int64_t> slotFactors(const ExpertFactors &f, int64_t last = -2) {
  std::vector<int64_t> factors(f.tokens);
  factors.push_back(f.slot);
  if (last != -2)
    factors.push_back(last);
  return factors;
}

OpParameters expertParameters(const OpInstance &op) {
  ExpertParameters parameters;
  ExpertRouting &routing = parameters.routing;
  routing.topK = op.integer("top_k");
  routing.sigmoid = op.text("scoring") == "sigmoid";
  routing.normalize = op.flag("normalize");
  routing.scaling = op.has("scaling") ? op.real("scaling") : 1.0;
  routing.groups = op.integer("groups");
  routing.topGroups = op.integer("top_groups");
  routing.groupTop = op.has("group_top") ? op.integer("group_top") : 2;
  parameters.transposeRhs = op.flag("transpose_rhs");
  parameters.allToAll = op.text("dispatch") == "all_to_all";
  parameters.rate = op.real("rate");
  return parameters;
}

} // namespace

void addExpertOps(TableBuilder &table) {
  using K = AttrKind;
  table.family(OpFamily::Expert, expertParameters);
  // The router: scores from logits (softmax over the experts, or each
  // logit's sigmoid), the top_k highest (ties to the lower expert index)
  // in descending order, their scores as weights (renormalized to sum to
  // one with `normalize`, times `scaling`). fp32 inside and out. With a
  // `bias` [E] (DeepSeek-V3's e_score_correction_bias) the choice ranks
  // score + bias while the weights stay the scores; with `groups` and
  // `top_groups` it ranks only the experts of the token's top_groups
  // groups, a group ranked by the sum of its `group_top` (default 2)
  // highest score + bias.
  table
      .add("moe_route",
           {{"logits"}, {"bias", OperandKind::Float32, /*optional=*/true}}, 2,
           forwardRouteAttrs(),
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(routeOperands(op));
             TRELLIS_CHECK(routeBias(op));
             Shape slots = tokenShape(op.shape(0));
             slots.push_back(op.integer("top_k"));
             out.push_back(f32(slots));
             out.push_back({slots, ElementType::I32});
             return std::nullopt;
           })
      .member(ExpertKind::Route)
      .factors(routeFactors)
      .cost([](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = (5.0 + op.integer("top_k")) * elementCount(op.shape(0));
        return cost;
      })
      .precision(PrecisionPolicy::Float32);
  // The logits' gradient from the weights' (the chosen experts as the
  // forward op chose them): zero for experts a token did not take unless
  // softmax without renormalization spreads it over all.
  table
      .add("moe_route_grad",
           {{"logits"},
            {"experts", OperandKind::Index},
            {"weights_grad", OperandKind::Float32}},
           1, kRouteAttrs,
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(routeOperands(op));
             Shape slots = tokenShape(op.shape(0));
             slots.push_back(op.integer("top_k"));
             for (size_t i : {1, 2})
               if (op.shape(i) != slots)
                 return std::string(i == 1 ? "expected experts"
                                           : "expected weights_grad") +
                        " of shape " + formatShape(slots) + ", found " +
                        formatShape(op.shape(i));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .member(ExpertKind::Route)
      .gradient()
      .factors(routeFactors)
      .cost([](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = 4.0 * elementCount(op.shape(0));
        return cost;
      })
      .precision(PrecisionPolicy::Float32);

  // Each slot's row times its expert's matrix: lhs [..., K] (one row per
  // token, used by each of its slots) or [..., k, K] (one per slot),
  // weight [E, K, N] ([E, N, K] with transpose_rhs, nn.Linear's layout),
  // experts [..., k] in [0, E); the result is [..., k, N]. With `axes`
  // (expert parallelism) the weight holds experts [p E, (p + 1) E) of the
  // group's E x size, p the rank's place along the axes, and slots routed
  // to other experts give zeros. With `dispatch = "all_to_all"` (the
  // lowering of expert parallelism's all-to-all dispatch) the operands and
  // result are the rank's own slots instead: the kernel sends each slot's
  // row to the rank holding its expert and gets the product back.
  OpEffects exchangesRows;
  exchangesRows.exchangesWhen = {"dispatch", "all_to_all"};
  table
      .add("expert_matmul",
           {{"lhs"}, {"weight"}, {"experts", OperandKind::Index}}, 1,
           {{"transpose_rhs", K::Bool, false},
            kOptionalAxes,
            {"dispatch", K::String, false}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(checkDispatch(op));
             TRELLIS_CHECK(expectSlots(op, 2));
             bool perToken = false;
             TRELLIS_CHECK(lhsRows(op, 0, 2, perToken));
             TRELLIS_CHECK(expectRank(op, 1, "weight [experts, K, N]", 3));
             int64_t k = 0, n = 0;
             weightSizes(op.shape(1), op.flag("transpose_rhs"), k, n);
             if (op.shape(0).back() != k)
               return "contracting sizes differ: lhs " +
                      formatShape(op.shape(0)) + " has " +
                      text(op.shape(0).back()) + ", weight " +
                      formatShape(op.shape(1)) + " has " + text(k);
             Shape result = op.shape(2);
             result.push_back(n);
             out.push_back(like(op, 0, result));
             return std::nullopt;
           })
      .member(ExpertKind::Matmul)
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        bool perToken = false, transposed = op.flag("transpose_rhs");
        lhsRows(op, 0, 2, perToken);
        int64_t k = 0, n = 0;
        weightSizes(op.shape(1), transposed, k, n);
        // With `axes`, slots whose expert lives elsewhere give zeros: a
        // split of the experts leaves the result partial.
        ExpertFactors f = addExpertFactors(
            rule, op.shape(2), op.shape(1)[0], k, n, FactorKind::Parallel,
            splitExpertKind(op, FactorKind::Reduction));
        rule.operandFactors = {lhsFactors(f, perToken),
                               weightFactors(f, transposed), slotFactors(f)};
        rule.resultFactors = {slotFactors(f, f.n)};
        return rule;
      })
      .cost([](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = 2.0 * elementCount(op.resultShape(0)) * op.shape(0).back();
        return cost;
      })
      .effects(exchangesRows)
      .computeClass(ComputeClass::Gemm);
  // The weight's gradient: for each expert, its slots' lhs rows times
  // their result gradients, summed over the slots in token order (an
  // expert no slot chose gets zeros). In the weight's layout; with `axes`,
  // of the rank's range of the experts, as expert_matmul's; with
  // `dispatch = "all_to_all"` from the rank's own slots, whose rows the
  // kernel sends to the ranks holding their experts.
  table
      .add("expert_matmul_weight_grad",
           {{"lhs"}, {"result_grad"}, {"experts", OperandKind::Index}}, 1,
           {{"num_experts", K::Int, true},
            {"transpose_rhs", K::Bool, false},
            kOptionalAxes,
            {"dispatch", K::String, false}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(checkDispatch(op));
             TRELLIS_CHECK(expectSlots(op, 2));
             bool perToken = false;
             TRELLIS_CHECK(lhsRows(op, 0, 2, perToken));
             const Shape &grad = op.shape(1), &slots = op.shape(2);
             if (grad.size() != slots.size() + 1 ||
                 Shape(grad.begin(), grad.end() - 1) != slots)
               return "expected result_grad of shape experts " +
                      formatShape(slots) + " + [N], found " + formatShape(grad);
             int64_t experts = op.integer("num_experts");
             if (experts < 1)
               return "expected num_experts >= 1, found " + text(experts);
             int64_t k = op.shape(0).back(), n = grad.back();
             out.push_back(like(op, 0,
                                op.flag("transpose_rhs")
                                    ? Shape{experts, n, k}
                                    : Shape{experts, k, n}));
             return std::nullopt;
           })
      .member(ExpertKind::Matmul)
      .gradient()
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        bool perToken = false, transposed = op.flag("transpose_rhs");
        lhsRows(op, 0, 2, perToken);
        // With `axes`, each rank computes its own experts' gradients.
        ExpertFactors f = addExpertFactors(
            rule, op.shape(2), op.integer("num_experts"), op.shape(0).back(),
            op.shape(1).back(), FactorKind::Reduction,
            splitExpertKind(op, FactorKind::Parallel));
        rule.operandFactors = {lhsFactors(f, perToken), slotFactors(f, f.n),
                               slotFactors(f)};
        rule.resultFactors = {weightFactors(f, transposed)};
        rule.linearOperand = 1;
        return rule;
      })
      .cost([](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = 2.0 * elementCount(op.shape(1)) * op.shape(0).back();
        return cost;
      })
      .effects(exchangesRows)
      .computeClass(ComputeClass::Gemm);

  // How many slots chose each expert: [E] f32 from experts [..., k]. The
  // tokens sum away (a split leaves partial counts). Not differentiable.
  table
      .add("expert_counts", {{"experts", OperandKind::Index}}, 1,
           {{"num_experts", K::Int, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(expectSlots(op, 0));
             int64_t experts = op.integer("num_experts");
             if (experts < 1)
               return "expected num_experts >= 1, found " + text(experts);
             out.push_back(f32({experts}));
             return std::nullopt;
           })
      .member(ExpertKind::Counts)
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        std::vector<int64_t> slots =
            rule.addFactors(op.shape(0), FactorKind::Reduction);
        int64_t experts =
            rule.addFactor(op.integer("num_experts"), FactorKind::Whole);
        rule.operandFactors = {slots};
        rule.resultFactors = {{experts}};
        return rule;
      })
      .cost([](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = static_cast<double>(elementCount(op.shape(0)));
        return cost;
      })
      .precision(PrecisionPolicy::Float32);

  // DeepSeek's auxiliary-loss-free balancing (Megatron-Core's
  // moe_router_enable_expert_bias): a router's score bias [E] moved by
  // `rate` towards the mean load, bias + rate * sign(mean(counts) -
  // counts), from the step's counts [E] (every micro-batch and rank).
  table
      .add("expert_bias_update",
           {{"bias", OperandKind::Float32}, {"counts", OperandKind::Float32}},
           1, {{"rate", K::Real, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(expectRank(op, 0, "bias [experts]", 1));
             TRELLIS_CHECK(expectSameShape(op, 1, "counts", 0, "bias"));
             if (!(op.real("rate") > 0))
               return "expected rate > 0, found " +
                      std::to_string(op.real("rate"));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .member(ExpertKind::BiasUpdate)
      .factors([](const OpInstance &op) {
        // The mean load reads every expert's count.
        ShardingRule rule;
        int64_t experts = rule.addFactor(op.shape(0)[0], FactorKind::Whole);
        rule.operandFactors = {{experts}, {experts}};
        rule.resultFactors = {{experts}};
        return rule;
      })
      .cost([](const OpInstance &op) {
        OpCost cost = elementwiseCost(op, 0);
        cost.flops = 3.0 * elementCount(op.shape(0));
        return cost;
      })
      .precision(PrecisionPolicy::Float32);
}

} // namespace trellis::optable
