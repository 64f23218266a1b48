//===- PipelineSplit.cpp - A training step cut into pipeline stages -------===//

#include "trellis/Pipeline/PipelineSplit.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include <limits>
#include <map>
#include <set>

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

namespace {

using RankSet = std::set<int64_t>;

/// A forward, backward or weight-gradient action of one virtual stage (of
/// every micro-batch).
struct ActionKey {
  ActionKind kind = ActionKind::Forward;
  int64_t virtualStage = 0;
  bool operator<(const ActionKey &other) const {
    return std::tie(kind, virtualStage) <
           std::tie(other.kind, other.virtualStage);
  }
  bool operator==(const ActionKey &other) const {
    return kind == other.kind && virtualStage == other.virtualStage;
  }
};

/// Where an op runs: an action of one virtual stage, or (step ops) every
/// rank in `ranks`.
struct Placement {
  std::optional<ActionKey> action;
  RankSet ranks;
};

/// The shape and schedule a step was cut for (trellis-assign-stages), or
/// one stage with 1F1B.
struct CutOfStep {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  PipelineShape shape;
};

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

class Splitter {
public:
  Splitter(func::FuncOp step, const PipelineConfig &config,
           const CutOfStep &cut)
      : step_(step), config_(config), cut_(cut), body_(step.getBody().front()),
        ranks_(cut.shape.ranks) {}

  FailureOr<PipelineProgram> run();

private:
  LogicalResult placeActionOps();
  void placeStepOps();
  void placeArgumentsAndResults();
  /// Sends values replicated over config_.pieceAxis in pieces: inserts the
  /// slice and gather ops and places them.
  void sendInPieces();
  /// Where `key`'s action comes in the actions of one micro-batch on its
  /// rank: forwards in stage order, then each stage's backward and weight
  /// gradients from the last stage back.
  int64_t orderInMicroBatch(const ActionKey &key) const;
  /// Whether `a` runs before `b` on a rank that runs both.
  bool runsBefore(Operation *a, Operation *b);
  /// Records a transfer of `value` to `rank` unless it is made there.
  void requireOn(Value value, int64_t rank);
  /// The first reader of `transfer`'s value on its destination (null: only
  /// the results need it).
  Operation *firstReader(const StageTransfer &transfer);
  LogicalResult buildPrograms();

  int64_t rankOf(int64_t virtualStage) const { return virtualStage % ranks_; }
  int64_t chunkOf(int64_t virtualStage) const { return virtualStage / ranks_; }
  /// The index of `rank`'s program (created on first use).
  int64_t programIndex(int64_t rank, ActionKind kind, int64_t chunk,
                       bool receives);

  func::FuncOp step_;
  const PipelineConfig &config_;
  CutOfStep cut_;
  Block &body_;
  int64_t ranks_;
  llvm::DenseMap<Operation *, Placement> placement_;
  /// Whether the schedule has weight-gradient actions.
  bool splitsBackward_ = false;
  PipelineProgram program_;
  /// Transfers by (value, destination rank).
  std::map<std::pair<void *, int64_t>, int64_t> transferOf_;
  /// Programs by (rank, kind, chunk, receives).
  std::map<std::tuple<int64_t, ActionKind, int64_t, bool>, int64_t>
      programOf_;
};

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
      auto stage = op.getAttrOfType<IntegerAttr>(TrellisDialect::kStageAttrName);
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

void Splitter::sendInPieces() {
  if (config_.pieceAxis.empty())
    return;
  SmallVector<Operation *> producers;
  for (Operation &op : body_.without_terminator())
    if (op.getNumResults() == 1 && placement_[&op].action &&
        !llvm::isa<graph::MicrobatchSumOp>(op) &&
        op.hasAttr(TrellisDialect::kLocalLayoutAttrName))
      producers.push_back(&op);
  for (Operation *producer : producers) {
    auto layout = producer->getAttrOfType<ShardingAttr>(
        TrellisDialect::kLocalLayoutAttrName);
    if (layout.usesAxis(config_.pieceAxis))
      continue;
    MeshOp mesh = lookupMesh(producer, layout.getMeshName(),
                             [&] { return producer->emitError(); });
    std::optional<size_t> axis =
        mesh ? mesh.getMesh().getAxisIndex(config_.pieceAxis) : std::nullopt;
    if (!axis)
      continue;
    int64_t pieces = mesh.getMesh().getAxes()[*axis].getSize();
    Value value = producer->getResult(0);
    auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
    if (pieces < 2 || !type || !type.getElementType().isF32())
      continue;
    // Cut along the last dimension that divides.
    std::optional<int64_t> dim;
    for (int64_t d = type.getRank() - 1; d >= 0 && !dim; --d)
      if (type.getDimSize(d) % pieces == 0)
        dim = d;
    if (!dim)
      continue;
    // Readers of the micro-batch on each other rank.
    int64_t from = *placement_[producer].ranks.begin();
    std::map<int64_t, SmallVector<OpOperand *>> readers;
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (user == body_.getTerminator() || !placement_[user].action)
        continue;
      int64_t rank = *placement_[user].ranks.begin();
      if (rank != from)
        readers[rank].push_back(&use);
    }
    if (readers.empty())
      continue;
    OpBuilder builder(producer->getContext());
    ArrayAttr axes = builder.getStrArrayAttr({config_.pieceAxis});
    FlatSymbolRefAttr meshName = layout.getMeshName();
    SmallVector<int64_t> pieceShape(type.getShape());
    pieceShape[*dim] /= pieces;
    builder.setInsertionPointAfter(producer);
    auto slice = SliceShardOp::create(builder, producer->getLoc(),
                                      type.clone(pieceShape), value, meshName,
                                      axes, builder.getI64IntegerAttr(*dim));
    slice->setAttr(graph::GraphDialect::kPhaseAttrName,
                   producer->getAttr(graph::GraphDialect::kPhaseAttrName));
    placement_[slice] = placement_[producer];
    for (auto &[rank, uses] : readers) {
      // Before every reader in the block; in the action that runs first.
      Operation *firstInBlock = uses.front()->getOwner();
      Operation *firstToRun = firstInBlock;
      for (OpOperand *use : uses) {
        if (use->getOwner()->isBeforeInBlock(firstInBlock))
          firstInBlock = use->getOwner();
        if (runsBefore(use->getOwner(), firstToRun))
          firstToRun = use->getOwner();
      }
      builder.setInsertionPoint(firstInBlock);
      auto gather = AllGatherOp::create(builder, producer->getLoc(), type,
                                        slice.getResult(), meshName, axes,
                                        builder.getI64IntegerAttr(*dim));
      gather->setAttr(graph::GraphDialect::kPhaseAttrName,
                      firstToRun->getAttr(graph::GraphDialect::kPhaseAttrName));
      placement_[gather] = placement_[firstToRun];
      for (OpOperand *use : uses)
        use->set(gather.getResult());
    }
  }
}

Operation *Splitter::firstReader(const StageTransfer &transfer) {
  Operation *first = nullptr;
  Operation *terminator = body_.getTerminator();
  for (Operation *user : transfer.value.getUsers())
    if (user != terminator && placement_[user].ranks.count(transfer.to) &&
        (!first || runsBefore(user, first)))
      first = user;
  return first;
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
        return (reader ? reader : transfer.value.getDefiningOp())
                   ->emitOpError()
               << "reads a value of a micro-batch from pipeline rank "
               << transfer.from << " on rank " << transfer.to
               << " in the step: expected it to reach the step through "
                  "graph.microbatch_sum";
      const ActionKey &key = *readerPlace->action;
      int64_t receiving = programIndex(transfer.to, key.kind,
                                       chunkOf(key.virtualStage), true);
      program_.programs[transfer.to][receiving].items.push_back(
          {StageItem::Kind::Recv, nullptr, static_cast<int64_t>(index)});
      transfer.recvProgram = receiving;
      transfer.readProgram = programOfAction(key);
      continue;
    }
    if (readerPlace && readerPlace->action)
      return reader->emitOpError()
             << "reads a value of the step from pipeline rank "
             << transfer.from << " inside a micro-batch on rank "
             << transfer.to << ": the step's values are made after every "
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
      std::vector<StageItem> &items = program_.programs[rank][stepProgram].items;
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
  placeStepOps();
  placeArgumentsAndResults();
  sendInPieces();
  if (failed(buildPrograms()))
    return failure();
  // The results each rank returns.
  program_.results.assign(ranks_, {});
  Operation *terminator = body_.getTerminator();
  for (auto [index, holders] : llvm::enumerate(program_.resultRanks))
    for (int64_t rank : holders)
      program_.results[rank].emplace_back(index,
                                          terminator->getOperand(index));
  return std::move(program_);
}

/// Orders each rank's programs by `schedule`'s streams.
LogicalResult buildSchedules(Operation *anchor, PipelineProgram &program_,
                             const PipelineStreams &schedule) {
  int64_t ranks_ = program_.ranks();
  program_.schedule.assign(ranks_, {});
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    std::vector<ScheduledAction> &entries = program_.schedule[rank];
    std::set<std::pair<int64_t, int64_t>> scheduled; // (program, micro-batch)
    auto add = [&](int64_t program, int64_t microBatch) {
      if (program >= 0 && scheduled.insert({program, microBatch}).second)
        entries.push_back({program, microBatch});
    };
    for (const PipelineAction &action : schedule[rank]) {
      using Kind = PipelineAction::Kind;
      switch (action.kind) {
      case Kind::RecvActivation:
        add(program_.findProgram(rank, ActionKind::Forward, action.chunk, true),
            action.microBatch);
        break;
      case Kind::RecvGradient:
        add(program_.findProgram(rank, ActionKind::Backward, action.chunk, true),
            action.microBatch);
        break;
      case Kind::Forward:
      case Kind::Backward:
      case Kind::WeightGradient: {
        ActionKind kind = action.kind == Kind::Forward    ? ActionKind::Forward
                          : action.kind == Kind::Backward ? ActionKind::Backward
                                                          : ActionKind::Weight;
        add(program_.findProgram(rank, kind, action.chunk, true), action.microBatch);
        add(program_.findProgram(rank, kind, action.chunk, false), action.microBatch);
        break;
      }
      case Kind::SendActivation:
      case Kind::SendGradient:
        break; // Sent at the end of the action that made the values.
      }
    }
    add(program_.findProgram(rank, ActionKind::Step, 0, false), -1);
    // Every program of a micro-batch must run for each of them.
    std::vector<int64_t> runs(program_.programs[rank].size(), 0);
    for (const ScheduledAction &entry : entries)
      ++runs[entry.program];
    for (auto [index, program] : llvm::enumerate(program_.programs[rank])) {
      int64_t expected =
          program.kind == ActionKind::Step ? 1 : program_.microBatches;
      if (runs[index] == expected)
        continue;
      auto op = llvm::find_if(program.items, [](const StageItem &item) {
        return item.kind == StageItem::Kind::Op;
      });
      InFlightDiagnostic diag =
          op != program.items.end() ? op->op->emitOpError() : anchor->emitError();
      return diag << "belongs to the " << program.name()
                  << " program of pipeline rank " << rank << ", which the "
                  << scheduleKindName(program_.kind) << " schedule runs "
                  << runs[index] << " times: expected " << expected;
    }
  }
  return success();
}

/// Sets StageTransfer::completedBy.
void findCompletions(PipelineProgram &program_) {
  int64_t ranks_ = program_.ranks();
  // A rank runs its schedule in order and stops at the first action that
  // reads a received value until it has arrived. So when rank q sends
  // anything, for the same micro-batch, in an action after the one that
  // read the value, q has received it; when the original sender gets that
  // later transfer, its own send has completed.
  int64_t m = program_.microBatches;
  // position[rank][program][micro-batch]: index in the rank's schedule.
  std::vector<std::vector<std::vector<int64_t>>> position(ranks_);
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    position[rank].assign(program_.programs[rank].size(),
                          std::vector<int64_t>(m, -1));
    for (auto [index, entry] : llvm::enumerate(program_.schedule[rank]))
      if (entry.microBatch >= 0)
        position[rank][entry.program][entry.microBatch] = index;
  }
  auto alwaysBefore = [&](int64_t rank, int64_t a, int64_t b) {
    for (int64_t mb = 0; mb < m; ++mb)
      if (!(position[rank][a][mb] < position[rank][b][mb]))
        return false;
    return true;
  };
  std::map<std::pair<int64_t, int64_t>, SmallVector<int64_t>> byRanks;
  for (auto [index, transfer] : llvm::enumerate(program_.transfers))
    if (transfer.perMicroBatch)
      byRanks[{transfer.from, transfer.to}].push_back(index);
  for (auto [index, transfer] : llvm::enumerate(program_.transfers)) {
    if (!transfer.perMicroBatch)
      continue;
    for (int64_t back : byRanks[{transfer.to, transfer.from}]) {
      const StageTransfer &other = program_.transfers[back];
      if (!alwaysBefore(transfer.to, transfer.readProgram, other.sendProgram) ||
          !alwaysBefore(transfer.from, transfer.sendProgram, other.recvProgram))
        continue;
      if (transfer.completedBy < 0 ||
          position[transfer.from][other.recvProgram][0] <
              position[transfer.from]
                      [program_.transfers[transfer.completedBy].recvProgram]
                      [0])
        transfer.completedBy = back;
    }
  }
}

} // namespace

int64_t PipelineProgram::findProgram(int64_t rank, ActionKind kind,
                                     int64_t chunk, bool receives) const {
  for (auto [index, program] : llvm::enumerate(programs[rank]))
    if (program.kind == kind && program.receives == receives &&
        (kind == ActionKind::Step || program.chunk == chunk))
      return static_cast<int64_t>(index);
  return -1;
}

LogicalResult schedulePipeline(Operation *anchor, PipelineProgram &program) {
  PipelineShape shape{program.ranks(), program.microBatches, program.chunks};
  std::string error;
  std::optional<PipelineStreams> streams =
      buildSchedule(program.kind, shape, &error);
  if (!streams)
    return anchor->emitError() << "pipeline schedule: " << error;
  if (!simulateSchedule(*streams, shape, PipelineCosts(), &error))
    return anchor->emitError() << "pipeline schedule: " << error;
  if (failed(buildSchedules(anchor, program, *streams)))
    return failure();
  for (StageTransfer &transfer : program.transfers)
    transfer.completedBy = -1;
  findCompletions(program);
  return success();
}

FailureOr<PipelineProgram> splitPipeline(func::FuncOp step,
                                         const PipelineConfig &config) {
  if (!llvm::hasSingleElement(step.getBody()))
    return step.emitError("expected a function with a single block");
  FailureOr<CutOfStep> cut = readCut(step);
  if (failed(cut))
    return failure();
  return Splitter(step, config, *cut).run();
}

} // namespace trellis
