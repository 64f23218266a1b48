//===- StagePlacement.cpp - Where each op of a step runs ------------------===//
//
// Ops of a micro-batch go to their stage's forward, backward or
// weight-gradient action; ops of the step to every rank that reads them;
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
        llvm::isa<graph::MicrobatchSumOp>(producer))
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
  for (auto &[op, where] : placement_)
    where.ranks = {rankOf(where.action->virtualStage)};
  return success();
}

void Splitter::placeStepOps() {
  // Ranks that read each argument inside micro-batches.
  llvm::DenseMap<Value, RankSet> actionReaders;
  for (auto &[op, where] : placement_)
    for (Value operand : op->getOperands())
      if (llvm::isa<BlockArgument>(operand))
        actionReaders[operand].insert(where.ranks.begin(), where.ranks.end());
  // What each result needs: an update or gradient where its parameter is
  // used, the loss on rank 0 (which reports it).
  Operation *terminator = body_.getTerminator();
  std::vector<RankSet> resultNeeds(terminator->getNumOperands());
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i) {
    std::optional<int64_t> argument;
    if (auto updates = step_.getResultAttrOfType<IntegerAttr>(
            i, graph::GraphDialect::kUpdatesAttrName))
      argument = updates.getInt();
    else if (auto gradientOf =
                 step_.getResultAttrOfType<IntegerAttr>(i, "graph.gradient_of"))
      argument = gradientOf.getInt();
    if (!argument) {
      resultNeeds[i] = {0};
      continue;
    }
    if (*argument >= 0 && *argument < body_.getNumArguments())
      resultNeeds[i] = actionReaders.lookup(body_.getArgument(*argument));
  }
  // Step ops, last first: every rank a user runs on, or that needs the
  // result they return.
  SmallVector<Operation *> stepOps;
  for (Operation &op : body_.without_terminator())
    if (!placement_.count(&op))
      stepOps.push_back(&op);
  for (Operation *op : llvm::reverse(stepOps)) {
    RankSet ranks;
    for (OpOperand &use : op->getUses()) {
      if (use.getOwner() == terminator) {
        const RankSet &needs = resultNeeds[use.getOperandNumber()];
        ranks.insert(needs.begin(), needs.end());
        continue;
      }
      const RankSet &userRanks = placement_[use.getOwner()].ranks;
      ranks.insert(userRanks.begin(), userRanks.end());
    }
    if (ranks.empty())
      ranks = {0};
    placement_[op].ranks = std::move(ranks);
  }
  program_.resultRanks.clear();
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i) {
    RankSet ranks = resultNeeds[i];
    if (ranks.empty()) {
      Operation *producer = terminator->getOperand(i).getDefiningOp();
      ranks = producer ? placement_[producer].ranks : RankSet{0};
    }
    program_.resultRanks.emplace_back(ranks.begin(), ranks.end());
  }
}

void Splitter::placeArgumentsAndResults() {
  std::vector<RankSet> holders(body_.getNumArguments());
  for (auto &[op, where] : placement_)
    for (Value operand : op->getOperands())
      if (auto argument = llvm::dyn_cast<BlockArgument>(operand))
        holders[argument.getArgNumber()].insert(where.ranks.begin(),
                                                where.ranks.end());
  // An argument returned unchanged, or read by nothing, stays on rank 0
  // unless a result that updates it lives elsewhere.
  Operation *terminator = body_.getTerminator();
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i)
    if (auto updates = step_.getResultAttrOfType<IntegerAttr>(
            i, graph::GraphDialect::kUpdatesAttrName))
      if (updates.getInt() >= 0 && updates.getInt() < body_.getNumArguments())
        holders[updates.getInt()].insert(program_.resultRanks[i].begin(),
                                         program_.resultRanks[i].end());
  for (RankSet &ranks : holders)
    if (ranks.empty())
      ranks = {0};
  for (const RankSet &ranks : holders)
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
      made.action.has_value() && !llvm::isa<graph::MicrobatchSumOp>(producer);
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
