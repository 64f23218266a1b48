//===- PipelineSplit.cpp - A training step cut into pipeline stages -------===//

#include "Splitter.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include <limits>

using namespace mlir;

namespace trellis {

int64_t orderInMicroBatch(ActionKind kind, int64_t virtualStage,
                          int64_t virtualStages) {
  switch (kind) {
  case ActionKind::Forward:
    return virtualStage;
  case ActionKind::Backward:
    return virtualStages + 2 * (virtualStages - 1 - virtualStage);
  case ActionKind::Weight:
    return virtualStages + 2 * (virtualStages - 1 - virtualStage) + 1;
  case ActionKind::Step:
    break;
  }
  return std::numeric_limits<int64_t>::max();
}

namespace pipeline {

FailureOr<CutOfStep> readCut(func::FuncOp step) {
  CutOfStep cut;
  auto microBatches = step->getAttrOfType<IntegerAttr>(
      graph::GraphDialect::kMicroBatchesAttrName);
  if (!microBatches)
    return step.emitError("expected a step of micro-batches "
                          "(graph.micro_batches) to split into actions");
  cut.shape.microBatches = microBatches.getInt();
  if (auto stages = step->getAttrOfType<IntegerAttr>(
          TrellisDialect::kPipelineStagesAttrName))
    cut.shape.ranks = stages.getInt();
  if (auto chunks = step->getAttrOfType<IntegerAttr>(
          TrellisDialect::kPipelineChunksAttrName))
    cut.shape.chunks = chunks.getInt();
  if (auto schedule = step->getAttrOfType<StringAttr>(
          TrellisDialect::kPipelineScheduleAttrName))
    cut.kind = *parseScheduleKind(schedule.getValue().str());
  return cut;
}

int64_t Splitter::orderInMicroBatch(const ActionKey &key) const {
  return trellis::orderInMicroBatch(key.kind, key.virtualStage,
                                    cut_.shape.virtualStages());
}

int64_t Splitter::programIndex(int64_t rank, ActionKind kind, int64_t chunk,
                               bool receives) {
  auto key = std::make_tuple(rank, kind, chunk, receives);
  auto [it, inserted] = programOf_.try_emplace(key, 0);
  if (inserted) {
    it->second = program_.programs[rank].size();
    ActionProgram program;
    program.kind = kind;
    program.chunk = chunk;
    program.receives = receives;
    program_.programs[rank].push_back(std::move(program));
  }
  return it->second;
}

LogicalResult Splitter::buildPrograms() {
  for (Operation &op : body_.without_terminator())
    for (int64_t rank : placement_[&op].ranks)
      for (Value operand : op.getOperands())
        requireOn(operand, rank);
  Operation *terminator = body_.getTerminator();
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i)
    for (int64_t rank : program_.resultRanks[i])
      requireOn(terminator->getOperand(i), rank);

  program_.programs.assign(ranks_, {});
  auto programOfAction = [&](const ActionKey &key) {
    return programIndex(rankOf(key.virtualStage), key.kind,
                        chunkOf(key.virtualStage), false);
  };
  // Programs in the order their first op comes in the step.
  for (Operation &op : body_.without_terminator()) {
    const Placement &where = placement_[&op];
    if (where.action)
      programOfAction(*where.action);
    else
      for (int64_t rank : where.ranks)
        programIndex(rank, ActionKind::Step, 0, false);
  }
  // Where each transfer is received: a micro-batch's value by the receive
  // program of the action that reads it first, a value of the step before
  // the first step op that reads it there (else at the step's end).
  std::map<std::pair<int64_t, Operation *>, SmallVector<int64_t>>
      stepReceivesBefore;
  std::map<int64_t, SmallVector<int64_t>> stepReceivesAtEnd;
  for (auto [index, transfer] : llvm::enumerate(program_.transfers)) {
    Operation *reader = firstReader(transfer);
    const Placement *readerPlace = reader ? &placement_[reader] : nullptr;
    if (transfer.perMicroBatch) {
      if (!readerPlace || !readerPlace->action)
        return (reader ? reader : transfer.value.getDefiningOp())->emitOpError()
               << "reads a value of a micro-batch from pipeline rank "
               << transfer.from << " on rank " << transfer.to
               << " in the step: expected it to reach the step through "
                  "graph.microbatch_sum";
      const ActionKey &key = *readerPlace->action;
      int64_t receiving =
          programIndex(transfer.to, key.kind, chunkOf(key.virtualStage), true);
      program_.programs[transfer.to][receiving].items.push_back(
          {StageItem::Kind::Recv, nullptr, static_cast<int64_t>(index)});
      transfer.recvProgram = receiving;
      transfer.readProgram = programOfAction(key);
      continue;
    }
    if (readerPlace && readerPlace->action)
      return reader->emitOpError()
             << "reads a value of the step from pipeline rank " << transfer.from
             << " inside a micro-batch on rank " << transfer.to
             << ": the step's values are made after every "
             << "micro-batch";
    if (reader)
      stepReceivesBefore[{transfer.to, reader}].push_back(index);
    else
      stepReceivesAtEnd[transfer.to].push_back(index);
  }

  // Sends of a micro-batch's values at the end of the action that made
  // them; totals of the step at the start of the step program, other step
  // values after the op that made them.
  std::map<int64_t, SmallVector<int64_t>> actionSends, totalSends;
  llvm::DenseMap<Operation *, SmallVector<int64_t>> sendsAfter;
  for (auto [index, transfer] : llvm::enumerate(program_.transfers)) {
    Operation *producer = transfer.value.getDefiningOp();
    const Placement &made = placement_[producer];
    if (transfer.perMicroBatch)
      actionSends[programOfAction(*made.action) * ranks_ + transfer.from]
          .push_back(index);
    else if (made.action)
      totalSends[transfer.from].push_back(index);
    else
      sendsAfter[producer].push_back(index);
  }
  for (int64_t rank = 0; rank < ranks_; ++rank)
    for (int64_t transfer : totalSends[rank]) {
      int64_t stepProgram = programIndex(rank, ActionKind::Step, 0, false);
      program_.programs[rank][stepProgram].items.push_back(
          {StageItem::Kind::Send, nullptr, transfer});
      program_.transfers[transfer].sendProgram = stepProgram;
    }
  for (Operation &op : body_.without_terminator()) {
    const Placement &where = placement_[&op];
    if (where.action) {
      int64_t rank = rankOf(where.action->virtualStage);
      program_.programs[rank][programOfAction(*where.action)].items.push_back(
          {StageItem::Kind::Op, &op, -1});
      continue;
    }
    for (int64_t rank : where.ranks) {
      int64_t stepProgram = programIndex(rank, ActionKind::Step, 0, false);
      std::vector<StageItem> &items =
          program_.programs[rank][stepProgram].items;
      for (int64_t transfer : stepReceivesBefore[{rank, &op}]) {
        items.push_back({StageItem::Kind::Recv, nullptr, transfer});
        program_.transfers[transfer].recvProgram =
            program_.transfers[transfer].readProgram = stepProgram;
      }
      items.push_back({StageItem::Kind::Op, &op, -1});
      for (int64_t transfer : sendsAfter.lookup(&op))
        if (program_.transfers[transfer].from == rank) {
          items.push_back({StageItem::Kind::Send, nullptr, transfer});
          program_.transfers[transfer].sendProgram = stepProgram;
        }
    }
  }
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    for (auto [key, sends] : actionSends) {
      if (key % ranks_ != rank)
        continue;
      int64_t index = key / ranks_;
      for (int64_t transfer : sends) {
        program_.programs[rank][index].items.push_back(
            {StageItem::Kind::Send, nullptr, transfer});
        program_.transfers[transfer].sendProgram = index;
      }
    }
    for (int64_t transfer : stepReceivesAtEnd[rank]) {
      int64_t stepProgram = programIndex(rank, ActionKind::Step, 0, false);
      program_.programs[rank][stepProgram].items.push_back(
          {StageItem::Kind::Recv, nullptr, transfer});
      program_.transfers[transfer].recvProgram = stepProgram;
    }
  }
  return success();
}

void Splitter::receiveStepValuesInSendOrder() {
  // Each rank's step program, and the step transfers it sends to each
  // peer in its order.
  std::vector<int64_t> stepProgram(ranks_, -1);
  for (int64_t rank = 0; rank < ranks_; ++rank)
    stepProgram[rank] = program_.findProgram(rank, ActionKind::Step, 0, false);
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> sentInOrder;
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    if (stepProgram[rank] < 0)
      continue;
    for (const StageItem &item :
         program_.programs[rank][stepProgram[rank]].items)
      if (item.kind == StageItem::Kind::Send)
        sentInOrder[{rank, program_.transfers[item.transfer].to}].push_back(
            item.transfer);
  }
  for (const auto &[link, sent] : sentInOrder) {
    int64_t to = link.second;
    if (stepProgram[to] < 0)
      continue;
    std::vector<StageItem> &items =
        program_.programs[to][stepProgram[to]].items;
    // Where each of the link's receives is now.
    std::map<int64_t, size_t> position;
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].kind == StageItem::Kind::Recv &&
          program_.transfers[items[i].transfer].from == link.first)
        position[items[i].transfer] = i;
    // Latest first: each receive comes no later than those sent after it.
    // Sort key: (position, then the send order among receives moved to
    // one position).
    std::map<int64_t, std::pair<size_t, size_t>> key;
    size_t earliest = items.size();
    for (size_t k = sent.size(); k-- > 0;) {
      auto found = position.find(sent[k]);
      if (found == position.end())
        continue;
      earliest = std::min(earliest, found->second);
      key[sent[k]] = {earliest, k};
    }
    std::vector<std::tuple<size_t, size_t, size_t>> order;
    for (size_t i = 0; i < items.size(); ++i) {
      auto moved = items[i].kind == StageItem::Kind::Recv
                       ? key.find(items[i].transfer)
                       : key.end();
      if (moved != key.end())
        order.emplace_back(moved->second.first, moved->second.second, i);
      else
        order.emplace_back(i, 0, i);
    }
    std::stable_sort(order.begin(), order.end());
    std::vector<StageItem> reordered;
    for (const auto &entry : order)
      reordered.push_back(items[std::get<2>(entry)]);
    items = std::move(reordered);
  }
}

FailureOr<PipelineProgram> Splitter::run() {
  // The split needs of the schedule only whether it splits backwards
  // (schedulePipeline orders and checks it).
  std::string error;
  std::optional<PipelineStreams> schedule =
      buildSchedule(cut_.kind, cut_.shape, &error);
  if (!schedule)
    return step_.emitError() << "pipeline schedule: " << error;
  program_.kind = cut_.kind;
  program_.microBatches = cut_.shape.microBatches;
  program_.chunks = cut_.shape.chunks;
  for (const std::vector<PipelineAction> &stream : *schedule)
    for (const PipelineAction &action : stream)
      splitsBackward_ |= action.kind == PipelineAction::Kind::WeightGradient;
  if (failed(placeActionOps()))
    return failure();
  placeOnRanks();
  sendInPieces();
  if (failed(buildPrograms()))
    return failure();
  receiveStepValuesInSendOrder();
  // The results each rank returns.
  program_.results.assign(ranks_, {});
  Operation *terminator = body_.getTerminator();
  for (auto [index, holders] : llvm::enumerate(program_.resultRanks))
    for (int64_t rank : holders)
      program_.results[rank].emplace_back(index, terminator->getOperand(index));
  return std::move(program_);
}

} // namespace pipeline

int64_t PipelineProgram::findProgram(int64_t rank, ActionKind kind,
                                     int64_t chunk, bool receives) const {
  for (auto [index, program] : llvm::enumerate(programs[rank]))
    if (program.kind == kind && program.receives == receives &&
        (kind == ActionKind::Step || program.chunk == chunk))
      return static_cast<int64_t>(index);
  return -1;
}

FailureOr<PipelineProgram> splitPipeline(func::FuncOp step,
                                         const PipelineConfig &config) {
  if (!llvm::hasSingleElement(step.getBody()))
    return step.emitError("expected a function with a single block");
  FailureOr<pipeline::CutOfStep> cut = pipeline::readCut(step);
  if (failed(cut))
    return failure();
  return pipeline::Splitter(step, config, *cut).run();
}

} // namespace trellis
