//===- StagePlacement.cpp - Where each op of a step runs ------------------===//
//
// Ops of a micro-batch go to their stage's forward, backward or
// weight-gradient action; ranks by the shared rules of RankPlacement.h;
// a value made on one rank and read on another becomes a transfer.
//
//===----------------------------------------------------------------------===//

#include "Splitter.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include <limits>

using namespace mlir;

namespace trellis::pipeline {

LogicalResult Splitter::placeActionOps() {
  // Ops of the micro-batch, on the stage trellis-assign-stages gave them.
  bool oneStage = cut_.shape.virtualStages() == 1;
  for (Operation &op : body_.without_terminator()) {
    bool total = llvm::isa<graph::MicrobatchSumOp>(op);
    auto phase =
        op.getAttrOfType<StringAttr>(graph::GraphDialect::kPhaseAttrName);
    if (!phase && !total)
      continue;
    ActionKey key{ActionKind::Backward, 0};
    if (phase)
      key.kind = phase.getValue() == "forward" ? ActionKind::Forward
                 : phase.getValue() == "weight" && splitsBackward_
                     ? ActionKind::Weight
                     : ActionKind::Backward;
    if (!oneStage) {
      auto stage =
          op.getAttrOfType<IntegerAttr>(TrellisDialect::kStageAttrName);
      if (!stage || stage.getInt() >= cut_.shape.virtualStages())
        return op.emitOpError()
               << "expected a virtual stage (trellis.stage) in [0, "
               << cut_.shape.virtualStages() << "), found "
               << (stage ? std::to_string(stage.getInt()) : "none")
               << ": cut the step with trellis-assign-stages first";
      key.virtualStage = stage.getInt();
    }
    placement_[&op].action = key;
  }
  // A micro-batch's value joins its step total in the action that made it.
  for (Operation &op : body_.without_terminator()) {
    if (!llvm::isa<graph::MicrobatchSumOp>(op))
      continue;
    Operation *producer = op.getOperand(0).getDefiningOp();
    auto it = producer ? placement_.find(producer) : placement_.end();
    if (it == placement_.end() || !it->second.action ||
        graph::makesStepTotal(producer))
      return op.emitOpError()
             << "sums a value over micro-batches that no op of the "
                "micro-batch makes (expected an operand marked with "
                "graph.phase)";
    if (it->second.action->virtualStage != placement_[&op].action->virtualStage)
      return op.emitOpError()
             << "sums a value of virtual stage "
             << it->second.action->virtualStage << " on virtual stage "
             << placement_[&op].action->virtualStage
             << ": expected the stage that makes it";
    placement_[&op].action = it->second.action;
  }
  return success();
}

void Splitter::placeOnRanks() {
  // The step as the shared placement rules see it (RankPlacement.h).
  PlacementProblem problem;
  problem.ranks = ranks_;
  llvm::DenseMap<Operation *, int64_t> indexOf;
  SmallVector<Operation *> ops;
  for (Operation &op : body_.without_terminator()) {
    indexOf[&op] = static_cast<int64_t>(ops.size());
    ops.push_back(&op);
  }
  Operation *terminator = body_.getTerminator();
  problem.argumentReaders.resize(body_.getNumArguments());
  for (Operation *op : ops) {
    PlacementOp placed;
    auto it = placement_.find(op);
    if (it != placement_.end() && it->second.action) {
      placed.action = true;
      placed.virtualStage = it->second.action->virtualStage;
    }
    for (Value result : op->getResults())
      for (OpOperand &use : result.getUses()) {
        if (use.getOwner() == terminator)
          placed.returnedAs.push_back(use.getOperandNumber());
        else if (auto reader = indexOf.find(use.getOwner());
                 reader != indexOf.end())
          placed.readers.push_back(reader->second);
      }
    for (Value operand : op->getOperands())
      if (auto argument = llvm::dyn_cast<BlockArgument>(operand))
        problem.argumentReaders[argument.getArgNumber()].push_back(indexOf[op]);
      else if (auto producer = indexOf.find(operand.getDefiningOp());
               producer != indexOf.end())
        placed.producers.push_back(producer->second);
    placed.scalarResults = op->getNumResults() > 0 &&
                           llvm::all_of(op->getResultTypes(), [](Type type) {
                             auto tensor =
                                 llvm::dyn_cast<RankedTensorType>(type);
                             return tensor && tensor.getRank() == 0;
                           });
    problem.ops.push_back(std::move(placed));
  }
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i) {
    Operation *producer = terminator->getOperand(i).getDefiningOp();
    int64_t producerIndex = producer ? indexOf.lookup(producer) : -1;
    graph::ResultArgument argument = graph::getResultArgument(step_, i);
    problem.results.push_back(
        {producerIndex, argument.argument, argument.updates});
  }
  RankPlacement placement = trellis::placeOnRanks(problem);
  for (auto [index, op] : llvm::enumerate(ops))
    placement_[op].ranks = placement.opRanks[index];
  program_.resultRanks.clear();
  for (const RankSet &ranks : placement.resultRanks)
    program_.resultRanks.emplace_back(ranks.begin(), ranks.end());
  program_.argumentRanks.clear();
  for (const RankSet &ranks : placement.argumentRanks)
    program_.argumentRanks.emplace_back(ranks.begin(), ranks.end());
}

void Splitter::requireOn(Value value, int64_t rank) {
  Operation *producer = value.getDefiningOp();
  if (!producer)
    return; // Arguments are held where they are read.
  const Placement &made = placement_[producer];
  if (made.ranks.count(rank))
    return;
  auto key = std::make_pair(value.getAsOpaquePointer(), rank);
  if (transferOf_.count(key))
    return;
  transferOf_[key] = program_.transfers.size();
  StageTransfer transfer;
  transfer.value = value;
  transfer.received = value;
  transfer.from = *made.ranks.begin();
  transfer.to = rank;
  transfer.channel = static_cast<int64_t>(program_.transfers.size());
  transfer.perMicroBatch =
      made.action.has_value() && !graph::makesStepTotal(producer);
  program_.transfers.push_back(transfer);
}

bool Splitter::runsBefore(Operation *a, Operation *b) {
  const Placement &pa = placement_[a], &pb = placement_[b];
  // Step ops run after every action, in program order; so do the ops of
  // one action.
  if (pa.action && pb.action && *pa.action == *pb.action)
    return a->isBeforeInBlock(b);
  if (pa.action && pb.action)
    return orderInMicroBatch(*pa.action) < orderInMicroBatch(*pb.action);
  if (pa.action || pb.action)
    return static_cast<bool>(pa.action);
  return a->isBeforeInBlock(b);
}

} // namespace trellis::pipeline
