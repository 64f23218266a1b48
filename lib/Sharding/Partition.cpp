//===- Partition.cpp - A sharded function becomes its per-rank program ----===//

#include "trellis/Sharding/Passes.h"

#include "ValueSharding.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_PARTITIONPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::sharding;

namespace {

/// Gives every op the builder inserts the micro-batch phase (graph.phase)
/// and the model part (graph.part) of the op being partitioned, so that
/// collectives made for an op run in the same forward or backward as the
/// op, and count with its part (ops of the step stay unmarked).
class ActionCopier : public OpBuilder::Listener {
public:
  void setSource(Operation *op) { source_ = op; }

  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    if (!source_)
      return;
    if (Attribute phase = source_->getAttr(graph::GraphDialect::kPhaseAttrName))
      op->setAttr(graph::GraphDialect::kPhaseAttrName, phase);
    if (graph::PartAttr part = graph::getModelPart(source_))
      graph::setModelPart(op, part);
  }

private:
  Operation *source_ = nullptr;
};

class Partitioner {
public:
  Partitioner(func::FuncOp function, MeshOp mesh)
      : function_(function), mesh_(mesh.getMesh()),
        meshName_(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        builder_(function.getContext(), &actionCopier_) {}

  LogicalResult run();

private:
  /// Turns `value` (local, sharded as `actual`; of global shape `global`)
  /// into one sharded as `required`, inserting collectives before the
  /// builder's point. A dimension one axis splits unevenly is padded with
  /// zeros before it is scattered or sliced, and cut back to its size
  /// after it is gathered.
  Value reshard(Location loc, Value value, ValueSharding actual,
                const ValueSharding &required, ArrayRef<int64_t> global);
  /// The global shape of a (local) value.
  ArrayRef<int64_t> globalShape(Value value) { return global_[value]; }
  Value allReduce(Location loc, Value value, const AxisNames &axes,
                  ReductionKind kind);
  /// `value` with `type`'s element type and `shape`.
  RankedTensorType withShape(Value value, ArrayRef<int64_t> shape) {
    return llvm::cast<RankedTensorType>(value.getType()).clone(shape);
  }
  ArrayAttr axesAttr(ArrayRef<StringAttr> axes) {
    return builder_.getArrayAttr(
        SmallVector<Attribute>(axes.begin(), axes.end()));
  }
  /// What partitioning an op needs from before any type changed.
  struct GlobalView {
    Operation *op;
    graph::ShardingRule rule;
    SmallVector<Type> operandTypes;
  };
  LogicalResult partitionOp(const GlobalView &global);
  /// A trellis.shard constraint: its operand resharded to its layout (the
  /// collectives in the constraint's phase and model part). Each
  /// constraint reshards anew: two constraints of one value are two
  /// collectives.
  void partitionConstraint(ShardOp op);

  func::FuncOp function_;
  MeshAttr mesh_;
  FlatSymbolRefAttr meshName_;
  ActionCopier actionCopier_;
  OpBuilder builder_;
  /// Whether the function is a step of micro-batches (graph.micro_batches):
  /// its results then get trellis.layout, which a pipeline split reads.
  bool pipelined_ = false;
  /// The sharding each (already local) value has, and its global shape.
  DenseMap<Value, ValueSharding> actual_;
  DenseMap<Value, SmallVector<int64_t>> global_;
  /// Values a constraint (trellis.shard) laid out: fixed, like arguments.
  DenseSet<Value> constrained_;
  /// Reshards already made, by value and required sharding: a value used
  /// twice in one layout is resharded once (the first use dominates the
  /// later ones in the block).
  DenseMap<std::pair<Value, Attribute>, Value> reshards_;
};

Value Partitioner::allReduce(Location loc, Value value, const AxisNames &axes,
                             ReductionKind kind) {
  return AllReduceOp::create(
      builder_, loc, value.getType(), value, meshName_, axesAttr(axes),
      ReductionKindAttr::get(builder_.getContext(), kind));
}

Value Partitioner::reshard(Location loc, Value value, ValueSharding actual,
                           const ValueSharding &required,
                           ArrayRef<int64_t> global) {
  SmallVector<int64_t> shape(
      llvm::cast<RankedTensorType>(value.getType()).getShape());
  // Dimension `d` (whole here) padded with zeros up to a multiple of
  // `pieces`, and cut back to `size`.
  auto padFor = [&](size_t d, int64_t pieces) {
    int64_t padded = (shape[d] + pieces - 1) / pieces * pieces;
    if (padded == shape[d])
      return;
    SmallVector<int64_t> low(shape.size(), 0), high(shape.size(), 0);
    high[d] = padded - shape[d];
    value = graph::PadOp::create(builder_, loc, value, low, high);
    shape[d] = padded;
  };
  auto cutTo = [&](size_t d, int64_t size) {
    if (size == shape[d])
      return;
    SmallVector<int64_t> offsets(shape.size(), 0), sizes(shape);
    sizes[d] = size;
    value = graph::SliceOp::create(builder_, loc, value, offsets, sizes);
    shape[d] = size;
  };
  // Whether dimension `d` is split over `axes` alone without dividing.
  auto uneven = [&](size_t d, const AxisNames &axes) {
    return axes.size() == 1 && d < global.size() &&
           global[d] % axesSize(mesh_, axes) != 0;
  };
  auto isPrefix = [](const AxisNames &prefix, const AxisNames &of) {
    return prefix.size() <= of.size() &&
           std::equal(prefix.begin(), prefix.end(), of.begin());
  };
  // 1. Partial values: a reduce_scatter where the required split appends
  //    exactly that axis to a dimension, an all_reduce for the rest. A
  //    partial value its user takes as it is (a linear op) stays partial.
  if (!actual.partial.empty() && actual.partial != required.partial) {
    AxisNames reduceAll, scatterAxes;
    SmallVector<int64_t> scatterDims;
    for (StringAttr axis : actual.partial) {
      bool scattered = false;
      for (size_t d = 0; d < shape.size() && !scattered; ++d) {
        AxisNames extended = actual.dims[d];
        extended.push_back(axis);
        if (extended == required.dims[d] &&
            (shape[d] % axesSize(mesh_, {axis}) == 0 ||
             uneven(d, extended))) {
          scatterAxes.push_back(axis);
          scatterDims.push_back(d);
          scattered = true;
        }
      }
      if (!scattered)
        reduceAll.push_back(axis);
    }
    if (!reduceAll.empty())
      value = allReduce(loc, value, reduceAll, actual.partialKind);
    for (auto [axis, d] : llvm::zip(scatterAxes, scatterDims)) {
      padFor(d, axesSize(mesh_, {axis}));
      shape[d] /= axesSize(mesh_, {axis});
      value = ReduceScatterOp::create(
          builder_, loc, withShape(value, shape), value, meshName_,
          axesAttr({axis}), builder_.getI64IntegerAttr(d),
          ReductionKindAttr::get(builder_.getContext(), actual.partialKind));
      actual.dims[d].push_back(axis);
    }
    actual.partial.clear();
  }
  // 2. Undo splits the requirement does not start with, minor axis first:
  //    move it to the dimension that wants it next (all_to_all), else
  //    gather it.
  for (size_t d = 0; d < shape.size(); ++d) {
    while (!isPrefix(actual.dims[d], required.dims[d])) {
      StringAttr axis = actual.dims[d].back();
      int64_t pieces = axesSize(mesh_, {axis});
      std::optional<size_t> target;
      bool padded = uneven(d, actual.dims[d]);
      for (size_t e = 0; e < shape.size() && !target && !padded; ++e) {
        if (e == d)
          continue;
        AxisNames extended = actual.dims[e];
        extended.push_back(axis);
        if (isPrefix(extended, required.dims[e]) && shape[e] % pieces == 0)
          target = e;
      }
      if (target) {
        shape[*target] /= pieces;
        shape[d] *= pieces;
        value = AllToAllOp::create(builder_, loc, withShape(value, shape),
                                   value, meshName_, axesAttr({axis}),
                                   builder_.getI64IntegerAttr(*target),
                                   builder_.getI64IntegerAttr(d));
        actual.dims[*target].push_back(axis);
      } else {
        shape[d] *= pieces;
        value = AllGatherOp::create(builder_, loc, withShape(value, shape),
                                    value, meshName_, axesAttr({axis}),
                                    builder_.getI64IntegerAttr(d));
        if (padded)
          cutTo(d, global[d]);
      }
      actual.dims[d].pop_back();
    }
  }
  // 3. Add the splits still missing: each rank keeps its piece.
  for (size_t d = 0; d < shape.size(); ++d) {
    for (size_t k = actual.dims[d].size(); k < required.dims[d].size(); ++k) {
      StringAttr axis = required.dims[d][k];
      if (shape[d] % axesSize(mesh_, {axis}) != 0)
        padFor(d, axesSize(mesh_, {axis}));
      shape[d] /= axesSize(mesh_, {axis});
      value = SliceShardOp::create(builder_, loc, withShape(value, shape),
                                   value, meshName_, axesAttr({axis}),
                                   builder_.getI64IntegerAttr(d));
      actual.dims[d].push_back(axis);
    }
  }
  return value;
}

LogicalResult Partitioner::partitionOp(const GlobalView &global) {
  Operation *op = global.op;
  const graph::ShardingRule &rule = global.rule;
  auto shardings = op->getAttrOfType<ArrayAttr>(kResultShardingsAttrName);
  if (!shardings || shardings.size() != op->getNumResults())
    return op->emitOpError("has no propagated sharding: run "
                           "-trellis-propagate-shardings first");
  SmallVector<ValueSharding> resultShardings;
  for (Attribute attr : shardings)
    resultShardings.push_back(
        ValueSharding::fromAttr(llvm::cast<ShardingAttr>(attr)));

  // The factors' axes follow from the operands as they are and the results
  // as propagation decided; each operand is brought to its projection.
  // Copies: pointers into actual_ would not survive its growth.
  SmallVector<ValueSharding> operandShardings;
  for (Value operand : op->getOperands())
    operandShardings.push_back(actual_.lookup(operand));
  SmallVector<const ValueSharding *> known;
  for (const ValueSharding &sharding : operandShardings)
    known.push_back(&sharding);
  for (const ValueSharding &sharding : resultShardings)
    known.push_back(&sharding);
  // Results first: the decision already made wins over operand layouts.
  SmallVector<const ValueSharding *> resultsFirst(
      known.begin() + op->getNumOperands(), known.end());
  graph::ShardingRule resultsOnly = rule;
  resultsOnly.operandFactors.clear();
  SmallVector<AxisNames> factorAxes =
      resolveFactors(resultsOnly, resultsFirst, mesh_);
  // Operands fixed by the user or a preset (arguments, constraints) decide
  // first, as in propagation; the others fill what is left.
  SmallVector<const ValueSharding *> fixedOperands(known.size(), nullptr);
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    if (llvm::isa<BlockArgument>(operand) ||
        llvm::isa_and_present<ShardOp>(operand.getDefiningOp()) ||
        constrained_.contains(operand))
      fixedOperands[i] = known[i];
  SmallVector<AxisNames> fromFixed = resolveFactors(rule, fixedOperands, mesh_);
  SmallVector<AxisNames> fromOperands = resolveFactors(rule, known, mesh_);
  // Factors the results have were decided with them; operands decide only
  // the factors no result has (contractions, reductions): the longest
  // leading run of their axes no other factor holds.
  for (auto [factor, axes] : llvm::enumerate(factorAxes))
    if (axes.empty() &&
        llvm::none_of(rule.resultFactors, [&](const auto &dims) {
          return llvm::is_contained(dims, static_cast<int64_t>(factor));
        })) {
      const AxisNames &wanted = fromFixed[factor].empty()
                                    ? fromOperands[factor]
                                    : fromFixed[factor];
      for (StringAttr axis : wanted) {
        bool taken = llvm::any_of(factorAxes, [&](const AxisNames &other) {
          return llvm::is_contained(other, axis);
        });
        if (taken)
          break;
        axes.push_back(axis);
      }
    }

  // A linear op whose result stays partial takes its operands partial too.
  AxisNames keptPartial;
  if (!resultShardings.empty())
    for (StringAttr axis : inheritedPartial(
             rule, ArrayRef<const ValueSharding *>(known).take_front(
                       op->getNumOperands())))
      if (llvm::is_contained(resultShardings[0].partial, axis))
        keptPartial.push_back(axis);

  builder_.setInsertionPoint(op);
  actionCopier_.setSource(op);
  SmallVector<Value> operands;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    ValueSharding required = projectFactors(rule.operandFactors[i], factorAxes);
    if (rule.linearOperand < 0 ||
        static_cast<int64_t>(i) == rule.linearOperand)
      required.partial = keptPartial;
    if (operandShardings[i] == required) {
      operands.push_back(operand);
      continue;
    }
    auto key = std::make_pair(
        operand, Attribute(required.toAttr(builder_.getContext(), meshName_)));
    auto cached = reshards_.find(key);
    if (cached != reshards_.end()) {
      operands.push_back(cached->second);
      continue;
    }
    Value resharded = reshard(op->getLoc(), operand, operandShardings[i],
                              required, globalShape(operand));
    if (pipelined_ && resharded.getDefiningOp())
      resharded.getDefiningOp()->setAttr(
          TrellisDialect::kLocalLayoutAttrName,
          required.toAttr(builder_.getContext(), meshName_));
    reshards_[key] = resharded;
    operands.push_back(resharded);
  }
  // What the op produces is what its rule implies from the factors; a user
  // may have asked for more (a split of a dimension the op needs whole):
  // such results are resharded after the op.
  SmallVector<ValueSharding> produced;
  for (size_t i = 0; i < op->getNumResults(); ++i) {
    ValueSharding sharding = projectFactors(rule.resultFactors[i], factorAxes);
    setResultPartial(rule, factorAxes, keptPartial, i, sharding);
    produced.push_back(sharding);
  }
  SmallVector<Type> resultTypes;
  for (auto [result, sharding] : llvm::zip(op->getResults(), produced)) {
    auto type = llvm::cast<RankedTensorType>(result.getType());
    resultTypes.push_back(
        type.clone(localShape(mesh_, type.getShape(), sharding)));
  }
  OperationState state(op->getLoc(), op->getName(), operands, resultTypes,
                       op->getAttrs());
  state.attributes.erase(kResultShardingsAttrName);
  if (op->getPropertiesStorage())
    state.propertiesAttr = op->getPropertiesAsAttribute();
  Operation *local = builder_.create(state);
  // The split of each operand and result dimension, for attributes that
  // depend on the rank's place.
  auto axesOf = [&](const ValueSharding &sharding) {
    SmallVector<Attribute> dims;
    for (const AxisNames &axes : sharding.dims)
      dims.push_back(axesAttr(axes));
    return builder_.getArrayAttr(dims);
  };
  SmallVector<ArrayAttr> tensorAxes;
  for (auto [i, operand] : llvm::enumerate(operands))
    tensorAxes.push_back(
        axesOf(projectFactors(rule.operandFactors[i], factorAxes)));
  for (const ValueSharding &sharding : produced)
    tensorAxes.push_back(axesOf(sharding));
  if (failed(
          llvm::cast<graph::ShardingRuleOpInterface>(local).localizeAttributes(
              global.operandTypes, tensorAxes)))
    return failure();
  builder_.setInsertionPointAfter(local);
  for (auto [result, localResult, made, wanted] : llvm::zip(
           op->getResults(), local->getResults(), produced, resultShardings)) {
    Value value = localResult;
    SmallVector<int64_t> global(
        llvm::cast<RankedTensorType>(result.getType()).getShape());
    global_[localResult] = global;
    // A value the op made whole over an axis (its operands were gathered)
    // cannot become a partial sum there: it stays whole, and users that
    // wanted it partial take it as it is.
    ValueSharding achieved = wanted;
    achieved.partial.clear();
    for (StringAttr axis : wanted.partial)
      if (llvm::is_contained(made.partial, axis))
        achieved.partial.push_back(axis);
    if (!(made == achieved))
      value = reshard(op->getLoc(), value, made, achieved, global);
    actual_[value] = achieved;
    global_[value] = global;
    // A pipelined step keeps each value's layout for the stage split.
    Operation *producer = value.getDefiningOp();
    if (pipelined_ && producer->getNumResults() == 1)
      producer->setAttr(TrellisDialect::kLocalLayoutAttrName,
                        achieved.toAttr(builder_.getContext(), meshName_));
    result.replaceAllUsesWith(value);
  }
  op->erase();
  return success();
}

void Partitioner::partitionConstraint(ShardOp op) {
  Value operand = op.getInput();
  ValueSharding required = ValueSharding::fromAttr(op.getSharding());
  builder_.setInsertionPoint(op);
  actionCopier_.setSource(op);
  Value value = operand;
  SmallVector<int64_t> global(globalShape(operand));
  if (!(actual_.lookup(operand) == required))
    value = reshard(op.getLoc(), operand, actual_.lookup(operand), required,
                    global);
  global_[value] = global;
  if (pipelined_ && value.getDefiningOp() && value != operand)
    value.getDefiningOp()->setAttr(
        TrellisDialect::kLocalLayoutAttrName,
        required.toAttr(builder_.getContext(), meshName_));
  actual_[value] = required;
  constrained_.insert(value);
  op.getResult().replaceAllUsesWith(value);
  op.erase();
}

LogicalResult Partitioner::run() {
  Block &body = function_.getBody().front();
  pipelined_ =
      function_->hasAttr(graph::GraphDialect::kMicroBatchesAttrName);
  // Rules and attributes read global shapes: capture them all before any
  // type changes.
  std::vector<GlobalView> work;
  for (Operation &op : body.without_terminator()) {
    if (llvm::isa<ShardOp>(op)) {
      work.push_back({&op, graph::ShardingRule(), {}});
      continue;
    }
    auto ruleOp = llvm::dyn_cast<graph::ShardingRuleOpInterface>(&op);
    if (!ruleOp)
      return op.emitOpError("has no sharding rule: the partitioner handles "
                            "graph ops only");
    work.push_back({&op, ruleOp.getShardingRule(),
                    SmallVector<Type>(op.getOperandTypes())});
  }
  SmallVector<Type> argTypes;
  for (BlockArgument arg : body.getArguments()) {
    auto type = llvm::cast<RankedTensorType>(arg.getType());
    ValueSharding sharding = ValueSharding::replicated(type.getRank());
    if (auto attr = function_.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), TrellisDialect::kShardingAttrName))
      sharding = ValueSharding::fromAttr(attr);
    global_[arg] = SmallVector<int64_t>(type.getShape());
    arg.setType(type.clone(localShape(mesh_, type.getShape(), sharding)));
    argTypes.push_back(arg.getType());
    actual_[arg] = sharding;
  }
  for (const GlobalView &global : work) {
    if (auto constraint = llvm::dyn_cast<ShardOp>(global.op)) {
      partitionConstraint(constraint);
      continue;
    }
    if (failed(partitionOp(global)))
      return failure();
  }
  // Results leave replicated, except those that replace an argument after
  // the step (`graph.updates`, the training-step contract): they keep that
  // argument's layout.
  Operation *terminator = body.getTerminator();
  builder_.setInsertionPoint(terminator);
  actionCopier_.setSource(nullptr);
  for (OpOperand &operand : terminator->getOpOperands()) {
    Value value = operand.get();
    auto type = llvm::cast<RankedTensorType>(value.getType());
    ValueSharding required = ValueSharding::replicated(type.getRank());
    if (auto updates = function_.getResultAttrOfType<IntegerAttr>(
            operand.getOperandNumber(), graph::GraphDialect::kUpdatesAttrName))
      required = actual_.lookup(body.getArgument(updates.getInt()));
    operand.set(reshard(terminator->getLoc(), value, actual_.lookup(value),
                        required, globalShape(value)));
  }
  SmallVector<Type> resultTypes(terminator->getOperandTypes());
  function_.setType(builder_.getFunctionType(argTypes, resultTypes));
  function_->setAttr(TrellisDialect::kPartitionedAttrName,
                     builder_.getUnitAttr());
  return success();
}

struct PartitionPass : public trellis::impl::PartitionPassBase<PartitionPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    // The mesh: that of the argument annotations (none: nothing to do).
    FlatSymbolRefAttr meshName;
    for (unsigned i = 0; i < function.getNumArguments() && !meshName; ++i)
      if (auto attr = function.getArgAttrOfType<ShardingAttr>(
              i, TrellisDialect::kShardingAttrName))
        meshName = attr.getMeshName();
    if (!meshName || function.isExternal())
      return;
    MeshOp mesh =
        lookupMesh(function, meshName, [&] { return function.emitError(); });
    if (!mesh || failed(Partitioner(function, mesh).run()))
      return signalPassFailure();
  }
};

} // namespace
