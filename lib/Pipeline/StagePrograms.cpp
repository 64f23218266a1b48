//===- StagePrograms.cpp - Stage functions read back as a pipeline program -===//
//
// The stage functions of trellis-split-stages hold a pipeline's programs in
// IR: ops grouped by trellis.program, transfers as trellis.send/recv paired
// by channel, the schedule and completions as attributes. The passes that
// schedule and verify a pipeline read them back into a PipelineProgram.
//
//===----------------------------------------------------------------------===//

#include "trellis/Pipeline/PipelineSplit.h"

#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include <map>

using namespace mlir;

namespace trellis {

FailureOr<SmallVector<func::FuncOp>> findStageFunctions(ModuleOp module,
                                                        StringRef stepName) {
  SmallVector<func::FuncOp> stages;
  for (auto function : module.getOps<func::FuncOp>()) {
    auto of =
        function->getAttrOfType<StringAttr>(TrellisDialect::kStageOfAttrName);
    if (!of || of.getValue() != stepName)
      continue;
    auto stage = function->getAttrOfType<IntegerAttr>(
        TrellisDialect::kPipelineStageAttrName);
    if (!stage)
      return function.emitError("a stage's program needs its stage "
                                "(trellis.pipeline_stage)");
    if (static_cast<size_t>(stage.getInt()) >= stages.size())
      stages.resize(stage.getInt() + 1);
    stages[stage.getInt()] = function;
  }
  if (stages.empty())
    return module.emitError() << "expected the stage programs of @" << stepName
                              << " (trellis-split-stages), found none";
  for (auto [index, stage] : llvm::enumerate(stages))
    if (!stage)
      return module.emitError() << "expected a program for stage " << index
                                << " of @" << stepName << ", found none";
  return stages;
}

FailureOr<SmallVector<std::pair<unsigned, Value>>>
stageResults(func::FuncOp stage) {
  SmallVector<std::pair<unsigned, Value>> results;
  Operation *terminator = stage.getBody().front().getTerminator();
  for (unsigned i = 0; i < stage.getNumResults(); ++i) {
    auto index = stage.getResultAttrOfType<IntegerAttr>(
        i, TrellisDialect::kResultIndexAttrName);
    if (!index)
      return stage.emitError() << "result " << i
                               << " names no result of the step "
                                  "(trellis.result)";
    results.emplace_back(index.getInt(), terminator->getOperand(i));
  }
  return results;
}

FailureOr<PipelineProgram> readStagePrograms(ModuleOp module,
                                             StringRef stepName) {
  FailureOr<SmallVector<func::FuncOp>> stages =
      findStageFunctions(module, stepName);
  if (failed(stages))
    return failure();
  func::FuncOp first = stages->front();
  PipelineProgram program;
  if (auto microBatches = first->getAttrOfType<IntegerAttr>(
          graph::GraphDialect::kMicroBatchesAttrName))
    program.microBatches = microBatches.getInt();
  if (auto chunks = first->getAttrOfType<IntegerAttr>(
          TrellisDialect::kPipelineChunksAttrName))
    program.chunks = chunks.getInt();
  if (auto schedule = first->getAttrOfType<StringAttr>(
          TrellisDialect::kPipelineScheduleAttrName))
    program.kind = *parseScheduleKind(schedule.getValue().str());
  int64_t ranks = static_cast<int64_t>(stages->size());
  program.programs.resize(ranks);
  program.schedule.resize(ranks);
  program.results.resize(ranks);
  program.argumentRanks.resize(first.getNumArguments());

  // Transfers by channel; the sends and receives seen for each.
  std::map<int64_t, int64_t> byChannel;
  std::map<int64_t, std::pair<Operation *, Operation *>> ends;
  auto transferOf = [&](int64_t channel) {
    auto [it, inserted] = byChannel.try_emplace(channel, 0);
    if (inserted) {
      it->second = static_cast<int64_t>(program.transfers.size());
      program.transfers.emplace_back();
      program.transfers.back().channel = channel;
    }
    return it->second;
  };
  for (auto [rankIndex, stage] : llvm::enumerate(*stages)) {
    int64_t rank = static_cast<int64_t>(rankIndex);
    for (unsigned i = 0; i < stage.getNumArguments(); ++i)
      if (stage.getArgAttr(i, TrellisDialect::kHeldAttrName))
        program.argumentRanks[i].push_back(rank);
    std::vector<ActionProgram> &programs = program.programs[rank];
    llvm::StringMap<int64_t> programIndex;
    llvm::DenseMap<Operation *, int64_t> programOfOp;
    SmallVector<int64_t> received;
    for (Operation &op : stage.getBody().front().without_terminator()) {
      auto name = op.getAttrOfType<StringAttr>(TrellisDialect::kProgramAttrName);
      std::optional<ActionProgramName> parsed =
          name ? parseProgramName(name.getValue().str()) : std::nullopt;
      if (!parsed)
        return op.emitOpError() << "expected the action program it belongs "
                                   "to (trellis.program: step, or forward, "
                                   "backward or weight, with _receive, then "
                                   ".c<chunk>), found "
                                << (name ? name.getValue() : "none");
      auto [it, inserted] = programIndex.try_emplace(
          name.getValue(), static_cast<int64_t>(programs.size()));
      if (inserted) {
        programs.emplace_back();
        static_cast<ActionProgramName &>(programs.back()) = *parsed;
      }
      int64_t index = it->second;
      programOfOp[&op] = index;
      ActionProgram &into = programs[index];
      if (auto send = llvm::dyn_cast<SendOp>(op)) {
        int64_t t = transferOf(send.getChannel());
        StageTransfer &transfer = program.transfers[t];
        if (ends[send.getChannel()].first)
          return send.emitOpError() << "sends channel " << send.getChannel()
                                    << ", which another send uses";
        ends[send.getChannel()].first = send;
        transfer.value = send.getInput();
        transfer.from = rank;
        transfer.to = send.getPeer();
        transfer.sendProgram = index;
        transfer.perMicroBatch = into.kind != ActionKind::Step;
        into.items.push_back({StageItem::Kind::Send, nullptr, t});
      } else if (auto recv = llvm::dyn_cast<RecvOp>(op)) {
        int64_t t = transferOf(recv.getChannel());
        StageTransfer &transfer = program.transfers[t];
        if (ends[recv.getChannel()].second)
          return recv.emitOpError() << "receives channel " << recv.getChannel()
                                    << ", which another receive uses";
        ends[recv.getChannel()].second = recv;
        transfer.received = recv.getResult();
        transfer.recvProgram = index;
        received.push_back(t);
        into.items.push_back({StageItem::Kind::Recv, nullptr, t});
      } else {
        into.items.push_back({StageItem::Kind::Op, &op, -1});
      }
    }
    // The program of each received value's first reader (the stage's ops
    // come in an order every program follows the ones it reads from in).
    for (int64_t t : received) {
      StageTransfer &transfer = program.transfers[t];
      Operation *reader = nullptr;
      for (Operation *user : transfer.received.getUsers())
        if (!llvm::isa<func::ReturnOp>(user) &&
            (!reader || user->isBeforeInBlock(reader)))
          reader = user;
      transfer.readProgram = reader ? programOfOp.lookup(reader) : -1;
    }
    FailureOr<SmallVector<std::pair<unsigned, Value>>> results =
        stageResults(stage);
    if (failed(results))
      return failure();
    for (auto [index, value] : *results) {
      program.results[rank].emplace_back(index, value);
      if (program.resultRanks.size() <= index)
        program.resultRanks.resize(index + 1);
      program.resultRanks[index].push_back(rank);
    }
    if (auto schedule =
            stage->getAttrOfType<ArrayAttr>(TrellisDialect::kScheduleAttrName))
      for (Attribute entry : schedule) {
        StringRef text = llvm::cast<StringAttr>(entry).getValue();
        std::optional<ScheduledActionName> parsed =
            parseActionName(text.str());
        int64_t index = parsed ? program.findProgram(rank, parsed->program.kind,
                                                     parsed->program.chunk,
                                                     parsed->program.receives)
                               : -1;
        if (index < 0)
          return stage.emitError() << "schedule names action '" << text
                                   << "', which no program of the stage runs";
        program.schedule[rank].push_back({index, parsed->microBatch});
      }
  }
  for (auto [channel, pair] : ends) {
    auto [send, recv] = pair;
    if (!send || !recv)
      return (send ? send : recv)->emitOpError()
             << (send ? "sends" : "receives") << " channel " << channel
             << ", which no stage " << (send ? "receives" : "sends");
    StageTransfer &transfer = program.transfers[byChannel[channel]];
    int64_t receiver = llvm::cast<IntegerAttr>(
                           recv->getParentOfType<func::FuncOp>()->getAttr(
                               TrellisDialect::kPipelineStageAttrName))
                           .getInt();
    if (transfer.to != receiver ||
        static_cast<int64_t>(llvm::cast<RecvOp>(recv).getPeer()) !=
            transfer.from)
      return send->emitOpError()
             << "sends channel " << channel << " from stage " << transfer.from
             << " to stage " << transfer.to << ", but stage " << receiver
             << " receives it from stage "
             << llvm::cast<RecvOp>(recv).getPeer();
  }
  return program;
}

} // namespace trellis
