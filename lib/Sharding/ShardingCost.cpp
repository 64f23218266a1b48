//===- ShardingCost.cpp - What a sharding costs, before partitioning ------===//

#include "trellis/Sharding/ShardingCost.h"

#include "Resharding.h"

#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Sharding/Passes.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace trellis::sharding;

namespace trellis {

namespace {

int64_t elementBytes(Type type) {
  auto tensor = llvm::cast<RankedTensorType>(type);
  return (tensor.getElementTypeBitWidth() + 7) / 8;
}

int64_t elements(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

/// Walks a propagated step as the partitioner would partition it and adds
/// up what one rank does.
class CostWalker {
public:
  /// `mesh`: that of the step's shardings; null for a step on one rank.
  CostWalker(func::FuncOp step, MeshAttr mesh)
      : step_(step), mesh_(mesh), context_(step.getContext()) {
    if (auto count = step->getAttrOfType<IntegerAttr>(
            graph::GraphDialect::kMicroBatchesAttrName))
      microBatches_ = count.getInt();
  }

  LogicalResult run(ShardedStepCost &cost);

private:
  /// How often what the partitioner inserts for `op` runs in a step: once
  /// per micro-batch for an op of one (graph.phase: the inserted ops take
  /// it), else once.
  int64_t runs(Operation *op) const {
    return op->hasAttr(graph::GraphDialect::kPhaseAttrName) ? microBatches_ : 1;
  }
  /// How often `op` itself runs: a total over micro-batches
  /// (graph.microbatch_sum) adds each micro-batch's value as it is made.
  int64_t executions(Operation *op) const {
    const OpContract *contract = graph::contractOf(op);
    return contract && contract->effects.accumulates ? microBatches_ : runs(op);
  }
  /// The value the partitioned step holds for `value`: a constraint that
  /// changed nothing stands for its operand.
  Value partitioned(Value value) const {
    auto it = sameAs_.find(value);
    return it == sameAs_.end() ? value : it->second;
  }
  bool isFixed(Value value) const {
    return llvm::isa<BlockArgument>(value) ||
           llvm::isa_and_present<ShardOp>(value.getDefiningOp()) ||
           constrained_.contains(value);
  }
  ArrayRef<int64_t> globalShape(Value value) const {
    return llvm::cast<RankedTensorType>(value.getType()).getShape();
  }
  void addCost(const OpCost &piece, int64_t times) {
    cost_.flops += piece.flops * times;
    cost_.bytesRead += piece.bytesRead * times;
    cost_.bytesWritten += piece.bytesWritten * times;
  }
  /// Adds the steps that take `value` from `actual` to `required`, run
  /// `times` a step.
  void countReshard(Value value, const ValueSharding &actual,
                    const ValueSharding &required, int64_t times);
  LogicalResult countOp(Operation *op);
  void countConstraint(ShardOp op);

  func::FuncOp step_;
  MeshAttr mesh_;
  MLIRContext *context_;
  int64_t microBatches_ = 1;
  ShardedStepCost cost_;
  DenseMap<Value, ValueSharding> actual_;
  DenseMap<Value, Value> sameAs_;
  DenseSet<Value> constrained_;
  /// Reshards already made, by value and required sharding (the
  /// partitioner's cache).
  DenseSet<std::pair<Value, Attribute>> reshards_;
};

void CostWalker::countReshard(Value value, const ValueSharding &actual,
                              const ValueSharding &required, int64_t times) {
  using Kind = ReshardStep::Kind;
  ArrayRef<int64_t> global = globalShape(value);
  SmallVector<int64_t> shape = localShape(mesh_, global, actual);
  int64_t bytesPerElement = elementBytes(value.getType());
  for (const ReshardStep &step :
       planReshard(mesh_, shape, actual, required, global)) {
    SmallVector<int64_t> before = std::move(shape);
    shape = step.shape;
    int64_t inBytes = elements(before) * bytesPerElement;
    int64_t outBytes = elements(shape) * bytesPerElement;
    const char *kind = nullptr;
    switch (step.kind) {
    case Kind::AllReduce:
      kind = "all_reduce";
      break;
    case Kind::ReduceScatter:
      kind = "reduce_scatter";
      break;
    case Kind::AllGather:
      kind = "all_gather";
      break;
    case Kind::AllToAll:
      kind = "all_to_all";
      break;
    case Kind::SliceShard:
      break; // keeps a piece: no data moves
    case Kind::Pad:
    case Kind::Slice: {
      // Layout ops, priced by their rows (no flops; the bytes moved).
      ElementType element =
          graph::toElementType(
              llvm::cast<RankedTensorType>(value.getType()).getElementType())
              .value_or(ElementType::F32);
      std::vector<TensorType> inputs{
          {std::vector<int64_t>(before.begin(), before.end()), element}};
      std::vector<TensorType> outputs{
          {std::vector<int64_t>(shape.begin(), shape.end()), element}};
      addCost(findOpContract(step.kind == Kind::Pad ? "pad" : "slice")
                  ->cost(OpInstance(inputs, AttrMap(), outputs)),
              times);
      break;
    }
    }
    if (!kind)
      continue;
    std::string key = std::string(kind) + " over";
    for (StringAttr axis : step.axes)
      key += " " + axis.getValue().str();
    StepReport::Traffic &traffic = cost_.communication[key];
    traffic.count += times;
    traffic.bytes += inBytes * times;
    traffic.wireBytes +=
        ringWireBytes(kind, axesSize(mesh_, step.axes), inBytes, outBytes) *
        times;
  }
}

void CostWalker::countConstraint(ShardOp op) {
  Value operand = partitioned(op.getInput());
  ValueSharding required = ValueSharding::fromAttr(op.getSharding());
  Value result = op.getResult();
  if (actual_.lookup(operand) == required) {
    // Its users read the operand itself, now laid out by the constraint.
    sameAs_[result] = operand;
    actual_[operand] = required;
    constrained_.insert(operand);
    return;
  }
  countReshard(operand, actual_.lookup(operand), required, runs(op));
  actual_[result] = required;
  constrained_.insert(result);
}

LogicalResult CostWalker::countOp(Operation *op) {
  if (!mesh_) {
    if (graph::contractOf(op))
      addCost(graph::costFromContract(op), executions(op));
    return success();
  }
  auto ruleOp = llvm::dyn_cast<graph::ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return op->emitOpError("has no sharding rule: the cost query prices "
                           "graph ops only");
  auto shardings = op->getAttrOfType<ArrayAttr>(kResultShardingsAttrName);
  if (!shardings || shardings.size() != op->getNumResults())
    return op->emitOpError("has no propagated sharding: run "
                           "-trellis-propagate-shardings first");
  graph::ShardingRule rule = ruleOp.getShardingRule();
  SmallVector<ValueSharding> results;
  for (Attribute attr : shardings)
    results.push_back(ValueSharding::fromAttr(llvm::cast<ShardingAttr>(attr)));
  SmallVector<Value> operands;
  SmallVector<ValueSharding> operandShardings;
  SmallVector<bool> fixed;
  for (Value operand : op->getOperands()) {
    operands.push_back(partitioned(operand));
    operandShardings.push_back(actual_.lookup(operands.back()));
    fixed.push_back(isFixed(operands.back()));
  }
  OpLayout layout =
      decideOpLayout(rule, operandShardings, fixed, results, mesh_);
  int64_t times = runs(op);
  FlatSymbolRefAttr meshName =
      FlatSymbolRefAttr::get(context_, "mesh"); // a key, not a lookup
  for (auto [i, operand] : llvm::enumerate(operands)) {
    const ValueSharding &required = layout.operands[i];
    if (operandShardings[i] == required)
      continue;
    Attribute key = required.toAttr(context_, meshName);
    if (!reshards_.insert({operand, key}).second)
      continue;
    countReshard(operand, operandShardings[i], required, times);
  }
  // The piece of the op each rank runs.
  SmallVector<SmallVector<int64_t>> operandShapes, resultShapes;
  for (auto [operand, sharding] : llvm::zip(operands, layout.operands))
    operandShapes.push_back(localShape(mesh_, globalShape(operand), sharding));
  for (auto [result, sharding] : llvm::zip(op->getResults(), layout.results))
    resultShapes.push_back(localShape(mesh_, globalShape(result), sharding));
  addCost(graph::costWithShapes(op, operandShapes, resultShapes),
          executions(op));
  // Results the op cannot make as wanted are resharded after it.
  for (auto [result, made, wanted] :
       llvm::zip(op->getResults(), layout.results, results)) {
    ValueSharding achieved = achievedSharding(made, wanted);
    if (!(made == achieved))
      countReshard(result, made, achieved, times);
    actual_[result] = achieved;
  }
  return success();
}

LogicalResult CostWalker::run(ShardedStepCost &cost) {
  Block &body = step_.getBody().front();
  for (BlockArgument arg : body.getArguments()) {
    auto type = llvm::cast<RankedTensorType>(arg.getType());
    ValueSharding sharding = ValueSharding::replicated(type.getRank());
    if (auto attr = step_.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), TrellisDialect::kShardingAttrName))
      sharding = ValueSharding::fromAttr(attr);
    actual_[arg] = sharding;
    auto role = step_.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), graph::GraphDialect::kRoleAttrName);
    if (!role)
      continue;
    int64_t bytes =
        elements(mesh_ ? localShape(mesh_, type.getShape(), sharding)
                       : SmallVector<int64_t>(type.getShape())) *
        elementBytes(type);
    if (role.getValue() == "param")
      cost_.parameterBytes += bytes;
    else if (llvm::is_contained({"adam_m", "adam_v", "master"},
                                role.getValue()))
      cost_.optimizerStateBytes += bytes;
  }
  for (Operation &op : body.without_terminator()) {
    if (auto constraint = llvm::dyn_cast<ShardOp>(op); constraint && mesh_) {
      countConstraint(constraint);
      continue;
    }
    if (failed(countOp(&op)))
      return failure();
  }
  // Results leave replicated, except those that replace an argument.
  Operation *terminator = body.getTerminator();
  for (OpOperand &operand :
       mesh_ ? terminator->getOpOperands() : MutableArrayRef<OpOperand>()) {
    Value value = partitioned(operand.get());
    ValueSharding required =
        ValueSharding::replicated(globalShape(value).size());
    if (auto updates = step_.getResultAttrOfType<IntegerAttr>(
            operand.getOperandNumber(), graph::GraphDialect::kUpdatesAttrName))
      required = actual_.lookup(body.getArgument(updates.getInt()));
    if (!(actual_.lookup(value) == required))
      countReshard(value, actual_.lookup(value), required, 1);
  }
  cost = std::move(cost_);
  return success();
}

} // namespace

llvm::json::Object ShardedStepCost::toJson() const {
  llvm::json::Object kinds;
  for (const auto &[kind, bytes] : wireBytesByKind(communication))
    kinds[kind] = bytes;
  return llvm::json::Object{
      {"flops", flops},
      {"bytes", llvm::json::Object{{"read", bytesRead},
                                   {"written", bytesWritten},
                                   {"params", parameterBytes},
                                   {"optimizer", optimizerStateBytes}}},
      {"comm_bytes", std::move(kinds)},
      {"communication", trafficJson(communication)},
  };
}

FailureOr<ShardedStepCost> estimateShardedStep(func::FuncOp step) {
  FlatSymbolRefAttr meshName;
  for (unsigned i = 0; i < step.getNumArguments() && !meshName; ++i)
    if (auto attr = step.getArgAttrOfType<ShardingAttr>(
            i, TrellisDialect::kShardingAttrName))
      meshName = attr.getMeshName();
  ShardedStepCost cost;
  if (!meshName) {
    if (failed(CostWalker(step, MeshAttr()).run(cost)))
      return failure();
    return cost;
  }
  MeshOp mesh = lookupMesh(step, meshName, [&] { return step.emitError(); });
  if (!mesh || failed(CostWalker(step, mesh.getMesh()).run(cost)))
    return failure();
  return cost;
}

} // namespace trellis
