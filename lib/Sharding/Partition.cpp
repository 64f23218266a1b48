//===- Partition.cpp - A sharded function becomes its per-rank program ----===//

#include "trellis/Sharding/Passes.h"

#include "Resharding.h"

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
    if (source_)
      graph::copyPlacement(source_, op);
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
  /// into one sharded as `required`: the steps of planReshard, as ops
  /// inserted before the builder's point.
  Value reshard(Location loc, Value value, const ValueSharding &actual,
                const ValueSharding &required, ArrayRef<int64_t> global);
  /// Whether a user or preset laid `value` out: an argument or a
  /// constraint's result. Such operands decide their op's factors first.
  bool isFixed(Value value) const {
    return llvm::isa<BlockArgument>(value) ||
           llvm::isa_and_present<ShardOp>(value.getDefiningOp()) ||
           constrained_.contains(value);
  }
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

Value Partitioner::reshard(Location loc, Value value,
                           const ValueSharding &actual,
                           const ValueSharding &required,
                           ArrayRef<int64_t> global) {
  using Kind = ReshardStep::Kind;
  auto shapeOf = [](Value of) {
    return SmallVector<int64_t>(
        llvm::cast<RankedTensorType>(of.getType()).getShape());
  };
  MLIRContext *context = builder_.getContext();
  for (const ReshardStep &step :
       planReshard(mesh_, shapeOf(value), actual, required, global)) {
    SmallVector<int64_t> before = shapeOf(value);
    RankedTensorType type = withShape(value, step.shape);
    IntegerAttr dim = builder_.getI64IntegerAttr(step.dim);
    switch (step.kind) {
    case Kind::AllReduce:
      value = allReduce(loc, value, step.axes, step.reduction);
      break;
    case Kind::ReduceScatter:
      value = ReduceScatterOp::create(
          builder_, loc, type, value, meshName_, axesAttr(step.axes), dim,
          ReductionKindAttr::get(context, step.reduction));
      break;
    case Kind::AllGather:
      value = AllGatherOp::create(builder_, loc, type, value, meshName_,
                                  axesAttr(step.axes), dim);
      break;
    case Kind::AllToAll:
      value = AllToAllOp::create(builder_, loc, type, value, meshName_,
                                 axesAttr(step.axes), dim,
                                 builder_.getI64IntegerAttr(step.concatDim));
      break;
    case Kind::SliceShard:
      value = SliceShardOp::create(builder_, loc, type, value, meshName_,
                                   axesAttr(step.axes), dim);
      break;
    case Kind::Pad: {
      SmallVector<int64_t> low(before.size(), 0), high(before.size(), 0);
      high[step.dim] = step.shape[step.dim] - before[step.dim];
      value = graph::PadOp::create(builder_, loc, value, low, high);
      break;
    }
    case Kind::Slice: {
      SmallVector<int64_t> offsets(before.size(), 0);
      value = graph::SliceOp::create(builder_, loc, value, offsets, step.shape);
      break;
    }
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
  SmallVector<bool> fixed;
  for (Value operand : op->getOperands()) {
    operandShardings.push_back(actual_.lookup(operand));
    fixed.push_back(isFixed(operand));
  }
  OpLayout layout =
      decideOpLayout(rule, operandShardings, fixed, resultShardings, mesh_);

  builder_.setInsertionPoint(op);
  actionCopier_.setSource(op);
  SmallVector<Value> operands;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    const ValueSharding &required = layout.operands[i];
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
  const SmallVector<ValueSharding> &produced = layout.results;
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
  for (const ValueSharding &split : layout.operandSplits)
    tensorAxes.push_back(axesOf(split));
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
    ValueSharding achieved = achievedSharding(made, wanted);
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
