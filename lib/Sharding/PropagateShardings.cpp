//===- PropagateShardings.cpp - Every value gets a sharding ---------------===//

#include "trellis/Sharding/Passes.h"

#include "ValueSharding.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/Support/FormatVariadic.h"

namespace trellis {
#define GEN_PASS_DEF_PROPAGATESHARDINGSPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::sharding;

namespace {

/// Tensors of at least this many bytes are named by --explain when they end
/// up replicated.
constexpr int64_t kLargeTensorBytes = 1 << 20;

struct PropagateShardingsPass
    : public trellis::impl::PropagateShardingsPassBase<PropagateShardingsPass> {
  using PropagateShardingsPassBase::PropagateShardingsPassBase;

  void runOnOperation() override;

private:
  /// One sweep over `op`: returns true if a sharding changed.
  bool propagateThrough(graph::ShardingRuleOpInterface op);

  ValueSharding &shardingOf(Value value) {
    auto it = shardings_.find(value);
    if (it == shardings_.end()) {
      auto type = llvm::cast<RankedTensorType>(value.getType());
      it = shardings_
               .try_emplace(value, ValueSharding::replicated(type.getRank()))
               .first;
    }
    return it->second;
  }

  /// The shardings of `op`'s operands then results (entries created as
  /// needed; valid until the next insertion).
  SmallVector<const ValueSharding *> tensorShardings(Operation *op) {
    SmallVector<Value> tensors(op->getOperands());
    tensors.append(op->getResults().begin(), op->getResults().end());
    for (Value tensor : tensors)
      (void)shardingOf(tensor); // create entries before taking pointers
    SmallVector<const ValueSharding *> known;
    for (Value tensor : tensors)
      known.push_back(&shardings_.find(tensor)->second);
    return known;
  }

  /// A constraint's layout as a hint for its operand: each of its whole
  /// dimensions takes the constraint's split where the operand does not
  /// use the axis already (a partial value is reduced, not split) and the
  /// size divides. The value's maker then produces the constrained layout
  /// itself (a residual add fed by a partial value: a reduce_scatter,
  /// not an all_reduce and a slice).
  bool hintOperand(ShardOp op) {
    Value operand = op.getInput();
    if (fixed_.contains(operand))
      return false;
    ValueSharding wanted = ValueSharding::fromAttr(op.getSharding());
    ValueSharding &sharding = shardingOf(operand);
    ArrayRef<int64_t> shape =
        llvm::cast<RankedTensorType>(operand.getType()).getShape();
    bool changed = false;
    for (size_t d = 0; d < shape.size() && d < wanted.dims.size(); ++d) {
      const AxisNames &axes = wanted.dims[d];
      if (axes.empty() || !sharding.dims[d].empty() ||
          llvm::any_of(axes,
                       [&](StringAttr a) { return sharding.usesAxis(a); }) ||
          shape[d] % axesSize(mesh_, axes) != 0)
        continue;
      sharding.dims[d] = axes;
      changed = true;
    }
    return changed;
  }

  /// The factors' axes, the fixed values (annotations, constraints) first:
  /// a split a user fixed wins over one propagation made; the others then
  /// fill the factors still unsplit with axes no factor holds.
  SmallVector<AxisNames>
  resolveWithPriority(const graph::ShardingRule &rule, ArrayRef<Value> tensors,
                      ArrayRef<const ValueSharding *> known) {
    SmallVector<const ValueSharding *> fixed;
    for (auto [tensor, sharding] : llvm::zip(tensors, known))
      fixed.push_back(fixed_.contains(tensor) ? sharding : nullptr);
    SmallVector<AxisNames> axes = resolveFactors(rule, fixed, mesh_);
    SmallVector<AxisNames> all = resolveFactors(rule, known, mesh_);
    for (auto [factor, chosen] : llvm::enumerate(axes)) {
      if (!chosen.empty() || all[factor].empty())
        continue;
      bool taken = llvm::any_of(all[factor], [&](StringAttr axis) {
        return llvm::any_of(axes, [&](const AxisNames &other) {
          return llvm::is_contained(other, axis);
        });
      });
      if (!taken)
        chosen = all[factor];
    }
    return axes;
  }

  /// Warns where two user-annotated values of `op` split one factor
  /// differently (or one factor's axes another wants): propagation keeps
  /// the first one's split and the partitioner reshards the other.
  void reportAnnotationConflicts(graph::ShardingRuleOpInterface op,
                                 const graph::ShardingRule &rule,
                                 ArrayRef<AxisNames> factorAxes);

  MeshAttr mesh_;
  DenseMap<Value, ValueSharding> shardings_;
  /// Each op's rule, computed once: propagation visits ops many times and
  /// changes none of their types or attributes.
  DenseMap<Operation *, graph::ShardingRule> rules_;
  const graph::ShardingRule &ruleOf(graph::ShardingRuleOpInterface op) {
    auto [it, inserted] = rules_.try_emplace(op.getOperation());
    if (inserted)
      it->second = op.getShardingRule();
    return it->second;
  }
  /// Values whose sharding the user fixed (argument annotations).
  DenseSet<Value> fixed_;
};

bool PropagateShardingsPass::propagateThrough(
    graph::ShardingRuleOpInterface op) {
  const graph::ShardingRule &rule = ruleOf(op);
  SmallVector<Value> tensors(op->getOperands());
  tensors.append(op->getResults().begin(), op->getResults().end());
  SmallVector<const ValueSharding *> known = tensorShardings(op);
  SmallVector<AxisNames> factorAxes = resolveWithPriority(rule, tensors, known);

  bool changed = false;
  size_t numOperands = op->getNumOperands();
  for (auto [i, tensor] : llvm::enumerate(tensors)) {
    if (fixed_.contains(tensor))
      continue;
    ArrayRef<int64_t> factors =
        i < numOperands
            ? ArrayRef<int64_t>(rule.operandFactors[i])
            : ArrayRef<int64_t>(rule.resultFactors[i - numOperands]);
    ValueSharding &sharding = shardingOf(tensor);
    ArrayRef<int64_t> shape =
        llvm::cast<RankedTensorType>(tensor.getType()).getShape();
    for (auto [d, factor] : llvm::enumerate(factors)) {
      if (factor == graph::ShardingRule::kNoFactor ||
          factorAxes[factor].empty() || !sharding.dims[d].empty())
        continue;
      const AxisNames &axes = factorAxes[factor];
      if (llvm::any_of(axes,
                       [&](StringAttr a) { return sharding.usesAxis(a); }) ||
          (shape[d] % axesSize(mesh_, axes) != 0 &&
           !(rule.paddable && axes.size() == 1)))
        continue;
      sharding.dims[d] = axes;
      changed = true;
    }
  }
  // Results lacking a split factor are partial over its axes: recorded now,
  // so that no user splits a dimension over an axis the value is partial on.
  SmallVector<const ValueSharding *> operandShardings(
      known.begin(), known.begin() + numOperands);
  AxisNames inherited = inheritedPartial(rule, operandShardings);
  for (size_t i = 0; i < op->getNumResults(); ++i) {
    Value result = op->getResult(i);
    if (fixed_.contains(result))
      continue;
    ValueSharding &sharding = shardingOf(result);
    AxisNames before = sharding.partial;
    setResultPartial(rule, factorAxes, inherited, i, sharding);
    changed |= sharding.partial != before;
  }
  return changed;
}

/// `argument 3 ("lm_head.weight")`, or `argument 3`.
/// A value whose layout is fixed: an argument (with its parameter name), or
/// a constraint's result (trellis.shard, with the op it constrains).
static std::string describeFixed(Value value) {
  auto arg = llvm::dyn_cast<BlockArgument>(value);
  if (!arg) {
    Operation *producer = value.getDefiningOp();
    std::string text = "the value laid out by a trellis.shard constraint";
    if (producer && producer->getNumOperands())
      if (Operation *source = producer->getOperand(0).getDefiningOp())
        text += " on the result of '" + source->getName().getStringRef().str() +
                "'";
    return text;
  }
  std::string text = llvm::formatv("argument {0}", arg.getArgNumber()).str();
  auto function = llvm::dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  if (!function)
    return text;
  if (auto name = function.getArgAttrOfType<StringAttr>(
          arg.getArgNumber(), graph::GraphDialect::kParamNameAttrName))
    text += " (\"" + name.getValue().str() + "\")";
  return text;
}

static std::string describeAxes(const AxisNames &axes) {
  if (axes.empty())
    return "nothing";
  std::string text;
  for (StringAttr axis : axes)
    text += (text.empty() ? "\"" : ", \"") + axis.getValue().str() + "\"";
  return text;
}

void PropagateShardingsPass::reportAnnotationConflicts(
    graph::ShardingRuleOpInterface op, const graph::ShardingRule &rule,
    ArrayRef<AxisNames> factorAxes) {
  // The annotated operand that decided each factor's split, if any.
  SmallVector<Value> decidedBy(factorAxes.size());
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    if (!fixed_.contains(operand))
      continue;
    for (auto [d, factor] : llvm::enumerate(rule.operandFactors[i]))
      if (factor != graph::ShardingRule::kNoFactor && !decidedBy[factor] &&
          !factorAxes[factor].empty() &&
          shardingOf(operand).dims[d] == factorAxes[factor])
        decidedBy[factor] = operand;
  }
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    if (!fixed_.contains(operand))
      continue;
    for (auto [d, factor] : llvm::enumerate(rule.operandFactors[i])) {
      if (factor == graph::ShardingRule::kNoFactor ||
          rule.factorKinds[factor] == graph::FactorKind::Whole)
        continue;
      const AxisNames &wanted = shardingOf(operand).dims[d];
      const AxisNames &chosen = factorAxes[factor];
      // A split the op refines (["tp"] taken as ["tp", "dp"]) costs only a
      // local slice: no conflict.
      bool refined = wanted.size() < chosen.size() &&
                     std::equal(wanted.begin(), wanted.end(), chosen.begin());
      if (wanted.empty() || wanted == chosen || refined)
        continue;
      InFlightDiagnostic warning = op->emitWarning();
      warning << "conflicting annotations: operand " << i << ", "
              << describeFixed(operand) << ", splits dimension " << d
              << " over " << describeAxes(wanted) << ", but ";
      if (Value winner = decidedBy[factor])
        warning << describeFixed(winner) << " splits the same factor over "
                << describeAxes(factorAxes[factor]);
      else
        warning << "the op splits that factor over "
                << describeAxes(factorAxes[factor])
                << " (its axes are taken by another factor, or do not divide "
                   "it)";
      warning << "; operand " << i << " is resharded";
    }
  }
}

void PropagateShardingsPass::runOnOperation() {
  func::FuncOp function = getOperation();
  MLIRContext *context = &getContext();
  FlatSymbolRefAttr meshName;
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto attr = function.getArgAttrOfType<ShardingAttr>(
        i, TrellisDialect::kShardingAttrName);
    if (!attr)
      continue;
    if (meshName && meshName != attr.getMeshName()) {
      function.emitError() << "arguments are sharded over two meshes: "
                           << meshName << " and " << attr.getMeshName();
      return signalPassFailure();
    }
    meshName = attr.getMeshName();
    Value arg = function.getArgument(i);
    shardings_[arg] = ValueSharding::fromAttr(attr);
    fixed_.insert(arg);
  }
  // Constraints (trellis.shard) fix their results' layouts.
  WalkResult fixedConstraints = function.walk([&](ShardOp op) {
    if (meshName && meshName != op.getSharding().getMeshName()) {
      op.emitError() << "a constraint over " << op.getSharding().getMeshName()
                     << " in a function sharded over " << meshName;
      return WalkResult::interrupt();
    }
    meshName = op.getSharding().getMeshName();
    shardings_[op.getResult()] = ValueSharding::fromAttr(op.getSharding());
    fixed_.insert(op.getResult());
    return WalkResult::advance();
  });
  if (fixedConstraints.wasInterrupted())
    return signalPassFailure();
  if (!meshName)
    return; // Nothing is sharded: a single-device program.
  MeshOp meshOp =
      lookupMesh(function, meshName, [&] { return function.emitError(); });
  if (!meshOp)
    return signalPassFailure();
  mesh_ = meshOp.getMesh();

  SmallVector<graph::ShardingRuleOpInterface> ops;
  function.walk([&](graph::ShardingRuleOpInterface op) { ops.push_back(op); });
  // Forward then backward sweeps until nothing changes; each change splits
  // one more dimension, so this ends.
  SmallVector<ShardOp> constraints;
  function.walk([&](ShardOp op) { constraints.push_back(op); });
  for (int sweep = 0; sweep < 64; ++sweep) {
    bool changed = false;
    for (graph::ShardingRuleOpInterface op : ops)
      changed |= propagateThrough(op);
    for (ShardOp op : constraints)
      changed |= hintOperand(op);
    for (graph::ShardingRuleOpInterface op : llvm::reverse(ops))
      changed |= propagateThrough(op);
    if (!changed)
      break;
  }

  // Record: partial axes of results, shardings on ops and arguments.
  Builder builder(context);
  for (graph::ShardingRuleOpInterface op : ops) {
    const graph::ShardingRule &rule = ruleOf(op);
    SmallVector<const ValueSharding *> known = tensorShardings(op);
    SmallVector<Value> tensors(op->getOperands());
    tensors.append(op->getResults().begin(), op->getResults().end());
    SmallVector<AxisNames> factorAxes =
        resolveWithPriority(rule, tensors, known);
    AxisNames inherited = inheritedPartial(
        rule, ArrayRef<const ValueSharding *>(known).take_front(
                  op->getNumOperands()));
    SmallVector<Attribute> attrs;
    for (auto [i, result] : llvm::enumerate(op->getResults())) {
      ValueSharding &sharding = shardingOf(result);
      setResultPartial(rule, factorAxes, inherited, i, sharding);
      attrs.push_back(sharding.toAttr(context, meshName));
    }
    op->setAttr(kResultShardingsAttrName, builder.getArrayAttr(attrs));
    reportAnnotationConflicts(op, rule, factorAxes);
    if (explain) {
      std::string text;
      for (auto [factor, axes] : llvm::enumerate(factorAxes)) {
        if (axes.empty())
          continue;
        text += llvm::formatv("{0}f{1} over", text.empty() ? "" : "; ", factor);
        for (StringAttr axis : axes)
          text += " \"" + axis.getValue().str() + "\"";
      }
      InFlightDiagnostic remark = op->emitRemark();
      remark << (text.empty() ? "no factor split" : "split " + text);
      for (Value result : op->getResults()) {
        auto type = llvm::cast<RankedTensorType>(result.getType());
        int64_t bytes = type.getNumElements() * 4;
        if (bytes >= kLargeTensorBytes && shardingOf(result).isReplicated())
          remark << llvm::formatv("; a result of {0} MiB stays replicated",
                                  bytes >> 20);
      }
      // Operands laid out otherwise than the factors say: where the
      // partitioner will insert collectives, and why.
      for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
        ValueSharding wanted =
            projectFactors(rule.operandFactors[i], factorAxes);
        const ValueSharding &has = shardingOf(operand);
        if (has.dims == wanted.dims && has.partial.empty())
          continue;
        remark << llvm::formatv("; operand {0} is resharded from ", i)
               << has.toAttr(context, meshName) << " to "
               << wanted.toAttr(context, meshName);
      }
    }
  }
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    Value arg = function.getArgument(i);
    if (fixed_.contains(arg) || !shardings_.count(arg) ||
        shardingOf(arg).isReplicated())
      continue;
    function.setArgAttr(i, TrellisDialect::kShardingAttrName,
                        shardingOf(arg).toAttr(context, meshName));
  }
}

} // namespace
