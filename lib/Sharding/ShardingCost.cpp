//===- ShardingCost.cpp - What a sharding costs, before partitioning ------===//
//
// The query writes the partitioned step down as data (each op with the
// values it reads and makes, its local cost and its collective, as the
// partitioner would build it), places the ops on pipeline ranks as the
// pipeline split does (PriceVirtualStep.cpp), adds the transfers between
// ranks, and sums each rank's share.
//
//===----------------------------------------------------------------------===//

#include "trellis/Sharding/ShardingCost.h"

#include "Resharding.h"
#include "VirtualStep.h"

#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Sharding/Passes.h"

using namespace mlir;
using namespace trellis::sharding;

namespace trellis {

namespace {

/// Records the sizes of a matmul's piece for the time model's GEMM
/// efficiency: lhs [batch..., M, K] · rhs [..., K, N] (either transposed),
/// of a graph.matmul or a graph.matmul_accumulate.
template <typename MatmulLike>
void describeMatmul(VirtualOp &compute, MatmulLike matmul,
                    ArrayRef<SmallVector<int64_t>> operandShapes) {
  ArrayRef<int64_t> lhs = operandShapes[0], rhs = operandShapes[1];
  if (lhs.size() < 2 || rhs.size() < 2)
    return;
  bool transposeLhs = matmul.getTransposeLhs();
  bool transposeRhs = matmul.getTransposeRhs();
  int64_t rows = lhs[lhs.size() - (transposeLhs ? 1 : 2)];
  int64_t depth = lhs[lhs.size() - (transposeLhs ? 2 : 1)];
  int64_t columns = rhs[rhs.size() - (transposeRhs ? 2 : 1)];
  // A shared rank-2 rhs folds the lhs's batch into its rows; batched
  // operands keep it apart (a batched GEMM's efficiency is its pieces').
  if (rhs.size() == 2)
    for (int64_t size : lhs.drop_back(2))
      rows *= size;
  compute.gemmRows = rows;
  compute.gemmColumns = columns;
  compute.gemmDepth = depth;
}

/// Writes the partitioned step down, from a propagated step (or, without a
/// mesh, a step that runs whole).
class VirtualStepBuilder {
public:
  /// `mesh`: that of the step's shardings; null for a step on one rank.
  VirtualStepBuilder(func::FuncOp step, MeshAttr mesh, VirtualStep &out)
      : step_(step), mesh_(mesh), context_(step.getContext()), out_(out),
        pipelined_(step->hasAttr(graph::GraphDialect::kMicroBatchesAttrName)) {}

  LogicalResult build();

private:
  int64_t addValue(HeldValue value) {
    out_.values.push_back(std::move(value));
    return static_cast<int64_t>(out_.values.size()) - 1;
  }
  int64_t addOp(VirtualOp op) {
    out_.ops.push_back(std::move(op));
    return static_cast<int64_t>(out_.ops.size()) - 1;
  }
  /// A value of the step as it is, unsplit.
  HeldValue whole(Value value) const;
  /// A new op: `origin` itself, or a reshard step inserted for it.
  VirtualOp opFor(Operation *origin, bool inserted) const;
  /// Adds the steps that take `value` to `required`, inserted for
  /// `origin`; returns the value they make.
  int64_t reshard(int64_t value, const ValueSharding &required,
                  Operation *origin);
  LogicalResult addGraphOp(Operation *op);
  void addConstraint(ShardOp op);

  func::FuncOp step_;
  MeshAttr mesh_;
  MLIRContext *context_;
  VirtualStep &out_;
  bool pipelined_;
  /// The value the partitioned step holds for each value of the step.
  DenseMap<Value, int64_t> heldOf_;
  /// Values a user or preset laid out (arguments, constraints' results).
  DenseSet<int64_t> fixed_;
  /// Reshards already made, by value and required sharding (the
  /// partitioner's cache: a value used twice in one layout is resharded
  /// once).
  DenseMap<std::pair<int64_t, Attribute>, int64_t> reshards_;
};

HeldValue VirtualStepBuilder::whole(Value value) const {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  HeldValue held;
  held.global.assign(type.getShape().begin(), type.getShape().end());
  held.shape = held.global;
  held.elementType = type.getElementType();
  held.layout = ValueSharding::replicated(type.getRank());
  return held;
}

VirtualOp VirtualStepBuilder::opFor(Operation *origin, bool inserted) const {
  VirtualOp op;
  op.origin = origin;
  const OpContract *contract = graph::contractOf(origin);
  op.accumulates = !inserted && contract && contract->effects.accumulates;
  op.action =
      origin->hasAttr(graph::GraphDialect::kPhaseAttrName) || op.accumulates;
  if (auto stage =
          origin->getAttrOfType<IntegerAttr>(TrellisDialect::kStageAttrName))
    op.virtualStage = stage.getInt();
  return op;
}

int64_t VirtualStepBuilder::reshard(int64_t value,
                                    const ValueSharding &required,
                                    Operation *origin) {
  using Kind = ReshardStep::Kind;
  const HeldValue from = out_.values[value];
  int64_t current = value;
  SmallVector<ReshardStep> steps =
      planReshard(mesh_, from.shape, from.layout, required, from.global);
  for (auto [index, step] : llvm::enumerate(steps)) {
    VirtualOp op = opFor(origin, /*inserted=*/true);
    const HeldValue &before = out_.values[current];
    // The value the step leaves, with the layout of the last one (which a
    // pipelined partition marks on it).
    HeldValue after = before;
    after.shape = step.shape;
    after.argument = -1;
    after.layout = required;
    after.producer = static_cast<int64_t>(out_.ops.size());
    int64_t inBytes = before.bytes();
    int64_t outBytes = after.bytes();
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
          graph::toElementType(from.elementType).value_or(ElementType::F32);
      std::vector<TensorType> inputs{
          {std::vector<int64_t>(before.shape.begin(), before.shape.end()),
           element}};
      std::vector<TensorType> outputs{
          {std::vector<int64_t>(step.shape.begin(), step.shape.end()),
           element}};
      const OpContract *row =
          findOpContract(step.kind == Kind::Pad ? "pad" : "slice");
      op.cost = row->cost(OpInstance(inputs, AttrMap(), outputs));
      op.kernel = row->name;
      break;
    }
    }
    if (kind) {
      op.collective = std::string(kind) + " over";
      for (StringAttr axis : step.axes)
        op.collective += " " + axis.getValue().str();
      op.traffic = {
          1, inBytes,
          ringWireBytes(kind, axesSize(mesh_, step.axes), inBytes, outBytes)};
    }
    op.reshardStep = step;
    op.operands = {current};
    current = addValue(std::move(after));
    op.results = {current};
    op.laidOut = pipelined_ && index + 1 == steps.size();
    addOp(std::move(op));
  }
  return current;
}

void VirtualStepBuilder::addConstraint(ShardOp op) {
  int64_t operand = heldOf_.lookup(op.getInput());
  ValueSharding required = ValueSharding::fromAttr(op.getSharding());
  // A constraint that changes nothing leaves its users the operand itself,
  // now laid out by it.
  int64_t value = out_.values[operand].layout == required
                      ? operand
                      : reshard(operand, required, op);
  out_.values[value].layout = required;
  heldOf_[op.getResult()] = value;
  fixed_.insert(value);
}

LogicalResult VirtualStepBuilder::addGraphOp(Operation *op) {
  VirtualOp compute = opFor(op, /*inserted=*/false);
  if (!mesh_) {
    for (Value operand : op->getOperands())
      compute.operands.push_back(heldOf_.lookup(operand));
    if (const OpContract *contract = graph::contractOf(op)) {
      compute.cost = graph::costFromContract(op);
      compute.kernel = contract->name;
    }
    compute.laidOut = pipelined_ && op->getNumResults() == 1;
    int64_t index = static_cast<int64_t>(out_.ops.size());
    for (Value result : op->getResults()) {
      HeldValue held = whole(result);
      held.producer = index;
      compute.results.push_back(addValue(std::move(held)));
      heldOf_[result] = compute.results.back();
    }
    addOp(std::move(compute));
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
  SmallVector<ValueSharding> wanted;
  for (Attribute attr : shardings)
    wanted.push_back(ValueSharding::fromAttr(llvm::cast<ShardingAttr>(attr)));
  SmallVector<int64_t> operands;
  SmallVector<ValueSharding> operandShardings;
  SmallVector<bool> fixed;
  for (Value operand : op->getOperands()) {
    operands.push_back(heldOf_.lookup(operand));
    operandShardings.push_back(out_.values[operands.back()].layout);
    fixed.push_back(fixed_.contains(operands.back()));
  }
  OpLayout layout =
      decideOpLayout(rule, operandShardings, fixed, wanted, mesh_);
  FlatSymbolRefAttr meshKey = FlatSymbolRefAttr::get(context_, "mesh");
  for (auto [i, operand] : llvm::enumerate(operands)) {
    const ValueSharding &required = layout.operands[i];
    if (operandShardings[i] == required) {
      compute.operands.push_back(operand);
      continue;
    }
    auto key =
        std::make_pair(operand, Attribute(required.toAttr(context_, meshKey)));
    auto cached = reshards_.find(key);
    if (cached == reshards_.end())
      cached = reshards_.try_emplace(key, reshard(operand, required, op)).first;
    compute.operands.push_back(cached->second);
  }
  // The piece of the op each rank runs.
  SmallVector<SmallVector<int64_t>> operandShapes, resultShapes;
  for (int64_t operand : compute.operands)
    operandShapes.push_back(out_.values[operand].shape);
  for (auto [result, sharding] : llvm::zip(op->getResults(), layout.results))
    resultShapes.push_back(localShape(mesh_, whole(result).global, sharding));
  compute.cost = graph::costWithShapes(op, operandShapes, resultShapes);
  if (const OpContract *contract = graph::contractOf(op))
    compute.kernel = contract->name;
  if (auto matmul = llvm::dyn_cast<graph::MatmulOp>(op))
    describeMatmul(compute, matmul, operandShapes);
  if (auto matmul = llvm::dyn_cast<graph::MatmulAccumulateOp>(op))
    describeMatmul(compute, matmul, operandShapes);
  // An attention's `axes` once partitioned: its queries' sequence split.
  // Its piece's query and key lengths and head dimension, for the time
  // model, as a GEMM's sizes.
  if (llvm::isa<graph::AttentionOp, graph::AttentionGradOp>(op)) {
    compute.sequenceAxes = layout.operandSplits[0].dims[1];
    if (operandShapes[0].size() == 4 && operandShapes[1].size() == 4) {
      compute.gemmRows = operandShapes[0][1];
      compute.gemmColumns = operandShapes[1][1];
      compute.gemmDepth = operandShapes[0][3];
    }
  }
  int64_t index = addOp(std::move(compute));
  // Results the op cannot make as wanted are resharded after it.
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    HeldValue held = whole(result);
    held.shape = resultShapes[i];
    held.layout = layout.results[i];
    held.producer = index;
    int64_t value = addValue(std::move(held));
    out_.ops[index].results.push_back(value);
    ValueSharding achieved = achievedSharding(layout.results[i], wanted[i]);
    bool resharded = !(layout.results[i] == achieved);
    if (resharded)
      value = reshard(value, achieved, op);
    else if (op->getNumResults() == 1)
      out_.ops[index].laidOut = pipelined_;
    heldOf_[result] = value;
  }
  return success();
}

LogicalResult VirtualStepBuilder::build() {
  Block &body = step_.getBody().front();
  for (BlockArgument arg : body.getArguments()) {
    HeldValue held = whole(arg);
    held.argument = arg.getArgNumber();
    if (auto attr = step_.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), TrellisDialect::kShardingAttrName);
        attr && mesh_) {
      held.layout = ValueSharding::fromAttr(attr);
      held.shape = localShape(mesh_, held.global, held.layout);
    }
    heldOf_[arg] = addValue(std::move(held));
    fixed_.insert(heldOf_[arg]);
    out_.arguments.push_back(heldOf_[arg]);
  }
  for (Operation &op : body.without_terminator()) {
    if (auto constraint = llvm::dyn_cast<ShardOp>(op); constraint && mesh_) {
      addConstraint(constraint);
      continue;
    }
    if (failed(addGraphOp(&op)))
      return failure();
  }
  // Results leave replicated, except those that replace an argument: they
  // keep its layout. The reshards belong to the step (no phase).
  Operation *terminator = body.getTerminator();
  for (OpOperand &operand : terminator->getOpOperands()) {
    int64_t value = heldOf_.lookup(operand.get());
    if (mesh_) {
      ValueSharding required =
          ValueSharding::replicated(out_.values[value].global.size());
      if (auto updates = step_.getResultAttrOfType<IntegerAttr>(
              operand.getOperandNumber(),
              graph::GraphDialect::kUpdatesAttrName))
        required = out_.values[out_.arguments[updates.getInt()]].layout;
      if (!(out_.values[value].layout == required))
        value = reshard(value, required, terminator);
    }
    out_.results.push_back(value);
  }
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

FailureOr<std::vector<ShardedStepCost>>
estimateShardedStep(func::FuncOp step, const CostQueryOptions &options) {
  FlatSymbolRefAttr meshName;
  for (unsigned i = 0; i < step.getNumArguments() && !meshName; ++i)
    if (auto attr = step.getArgAttrOfType<ShardingAttr>(
            i, TrellisDialect::kShardingAttrName))
      meshName = attr.getMeshName();
  MeshAttr mesh;
  if (meshName) {
    MeshOp meshOp =
        lookupMesh(step, meshName, [&] { return step.emitError(); });
    if (!meshOp)
      return failure();
    mesh = meshOp.getMesh();
  }
  VirtualStep virtualStep;
  if (failed(VirtualStepBuilder(step, mesh, virtualStep).build()))
    return failure();
  if (options.ringAttention && mesh)
    lowerRingAttention(virtualStep, mesh);
  return priceVirtualStep(step, mesh, virtualStep, options);
}

} // namespace trellis
