//===- PipelineSplit.cpp - A training step cut into pipeline stages -------===//

#include "trellis/Pipeline/PipelineSplit.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include <map>
#include <set>

using namespace mlir;

namespace trellis {

namespace {

using RankSet = std::set<int64_t>;

/// A forward, backward or weight gradient of one micro-batch on one virtual
/// stage.
struct ActionKey {
  enum class Phase { Forward, Backward, Weight };
  Phase phase = Phase::Forward;
  int64_t microBatch = 0;
  int64_t virtualStage = 0;
  bool operator<(const ActionKey &other) const {
    return std::tie(phase, microBatch, virtualStage) <
           std::tie(other.phase, other.microBatch, other.virtualStage);
  }
};

/// The key of a compute action of `rank`'s stream (of `ranks`), or none
/// for transfers.
std::optional<ActionKey> keyOf(const PipelineAction &action, int64_t rank,
                               int64_t ranks) {
  ActionKey key{ActionKey::Phase::Forward, action.microBatch,
                action.chunk * ranks + rank};
  switch (action.kind) {
  case PipelineAction::Kind::Forward:
    return key;
  case PipelineAction::Kind::Backward:
    key.phase = ActionKey::Phase::Backward;
    return key;
  case PipelineAction::Kind::WeightGradient:
    key.phase = ActionKey::Phase::Weight;
    return key;
  default:
    return std::nullopt;
  }
}

/// Where an op runs: an action of one virtual stage, or (step ops) every
/// rank in `ranks`.
struct Placement {
  std::optional<ActionKey> action;
  RankSet ranks;
};

class Splitter {
public:
  Splitter(func::FuncOp step, const PipelineConfig &config)
      : step_(step), config_(config), body_(step.getBody().front()),
        ranks_(config.shape.ranks) {}

  FailureOr<PipelineProgram> run();

private:
  LogicalResult placeActionOps();
  void placeStepOps();
  void placeArgumentsAndResults();
  /// Sends values replicated over config_.pieceAxis in pieces: inserts the
  /// slice and gather ops and places them.
  void sendInPieces();
  /// Whether `a` runs before `b` on a rank that runs both.
  bool runsBefore(Operation *a, Operation *b);
  /// Records a transfer of `value` to `rank` unless it is made there.
  void requireOn(Value value, int64_t rank);
  LogicalResult buildStreams(const PipelineStreams &schedule);
  /// Sets StageTransfer::completedBy.
  void findCompletions();

  int64_t rankOf(int64_t virtualStage) const { return virtualStage % ranks_; }
  int64_t virtualStageOf(graph::PartAttr part) const;

  func::FuncOp step_;
  const PipelineConfig &config_;
  Block &body_;
  int64_t ranks_;
  llvm::DenseMap<Operation *, Placement> placement_;
  /// Whether the schedule has weight-gradient actions.
  bool splitsBackward_ = false;
  /// Position of each action in its rank's schedule.
  std::map<ActionKey, size_t> schedulePosition_;
  PipelineProgram program_;
  /// Transfers by (value, destination rank).
  std::map<std::pair<void *, int64_t>, int64_t> transferOf_;
};

int64_t Splitter::virtualStageOf(graph::PartAttr part) const {
  int64_t stages = static_cast<int64_t>(config_.layers.size());
  if (part.isEmbedding())
    return 0;
  if (part.isHead())
    return stages - 1;
  int64_t first = 0;
  for (int64_t stage = 0; stage < stages; ++stage) {
    first += config_.layers[stage];
    if (part.getLayer() < first)
      return stage;
  }
  return stages - 1;
}

LogicalResult Splitter::placeActionOps() {
  // Ops of a micro-batch: by part, else by their users, else by operands.
  SmallVector<Operation *> unplaced;
  for (Operation &op : body_.without_terminator()) {
    auto microBatch =
        op.getAttrOfType<IntegerAttr>(graph::GraphDialect::kMicroBatchAttrName);
    if (!microBatch)
      continue;
    auto phase =
        op.getAttrOfType<StringAttr>(graph::GraphDialect::kPhaseAttrName);
    if (!phase ||
        (phase.getValue() != "forward" && phase.getValue() != "backward" &&
         phase.getValue() != "weight"))
      return op.emitOpError()
             << "has a micro-batch but no graph.phase \"forward\", "
                "\"backward\" or \"weight\"";
    if (microBatch.getInt() < 0 ||
        microBatch.getInt() >= config_.shape.microBatches)
      return op.emitOpError()
             << "belongs to micro-batch " << microBatch.getInt()
             << ", outside the schedule's " << config_.shape.microBatches;
    // Weight-gradient ops run in the backward unless the schedule splits
    // it.
    ActionKey key{phase.getValue() == "forward" ? ActionKey::Phase::Forward
                  : phase.getValue() == "weight" && splitsBackward_
                      ? ActionKey::Phase::Weight
                      : ActionKey::Phase::Backward,
                  microBatch.getInt(), -1};
    if (graph::PartAttr part = graph::getModelPart(&op))
      key.virtualStage = virtualStageOf(part);
    else
      unplaced.push_back(&op);
    placement_[&op].action = key;
  }
  auto stageOf = [&](Operation *op) -> int64_t {
    auto it = placement_.find(op);
    return it != placement_.end() && it->second.action
               ? it->second.action->virtualStage
               : -1;
  };
  for (Operation *op : llvm::reverse(unplaced)) {
    int64_t stage = -1;
    for (Operation *user : op->getUsers())
      if (int64_t candidate = stageOf(user); candidate >= 0)
        stage = stage < 0 ? candidate : std::min(stage, candidate);
    placement_[op].action->virtualStage = stage;
  }
  for (Operation *op : unplaced) {
    ActionKey &key = *placement_[op].action;
    for (Value operand : op->getOperands())
      if (Operation *producer = operand.getDefiningOp();
          key.virtualStage < 0 && producer)
        key.virtualStage = stageOf(producer);
    if (key.virtualStage < 0)
      return op->emitOpError()
             << "has no pipeline stage: it declares no model part "
                "(graph.part) and no user or operand has one";
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
  const RankSet &made = placement_[producer].ranks;
  if (made.count(rank))
    return;
  auto key = std::make_pair(value.getAsOpaquePointer(), rank);
  if (transferOf_.count(key))
    return;
  transferOf_[key] = program_.transfers.size();
  program_.transfers.push_back(
      {value, *made.begin(), rank,
       static_cast<int64_t>(program_.transfers.size())});
}

bool Splitter::runsBefore(Operation *a, Operation *b) {
  const Placement &pa = placement_[a], &pb = placement_[b];
  // Step ops run after every action, in program order; so do the ops of
  // one action.
  if (pa.action && pb.action && !(*pa.action < *pb.action) &&
      !(*pb.action < *pa.action))
    return a->isBeforeInBlock(b);
  if (pa.action && pb.action)
    return schedulePosition_[*pa.action] < schedulePosition_[*pb.action];
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
    // Readers on each other rank (one placement each: a step op on several
    // ranks keeps reading the whole value).
    int64_t from = *placement_[producer].ranks.begin();
    std::map<int64_t, SmallVector<OpOperand *>> readers;
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (user == body_.getTerminator())
        continue;
      const RankSet &ranks = placement_[user].ranks;
      if (ranks.size() == 1 && *ranks.begin() != from)
        readers[*ranks.begin()].push_back(&use);
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
      placement_[gather] = placement_[firstToRun];
      for (OpOperand *use : uses)
        use->set(gather.getResult());
    }
  }
}

LogicalResult Splitter::buildStreams(const PipelineStreams &schedule) {
  for (Operation &op : body_.without_terminator())
    for (int64_t rank : placement_[&op].ranks)
      for (Value operand : op.getOperands())
        requireOn(operand, rank);
  Operation *terminator = body_.getTerminator();
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i)
    for (int64_t rank : program_.resultRanks[i])
      requireOn(terminator->getOperand(i), rank);

  // Ops of each action, in program order; step ops per rank.
  std::map<ActionKey, SmallVector<Operation *>> actionOps;
  std::vector<SmallVector<Operation *>> stepOps(ranks_);
  for (Operation &op : body_.without_terminator()) {
    const Placement &where = placement_[&op];
    if (where.action)
      actionOps[*where.action].push_back(&op);
    else
      for (int64_t rank : where.ranks)
        stepOps[rank].push_back(&op);
  }
  // Transfers a rank receives before an action, and sends after the op
  // that makes the value (after its action for action ops).
  std::map<std::pair<int64_t, ActionKey>, SmallVector<int64_t>> receivesFor;
  std::map<std::pair<int64_t, Operation *>, SmallVector<int64_t>>
      stepReceivesFor;
  llvm::DenseMap<Operation *, SmallVector<int64_t>> sendsAfter;
  // A received value goes to the reader that runs first on its rank.
  for (auto [index, transfer] : llvm::enumerate(program_.transfers)) {
    sendsAfter[transfer.value.getDefiningOp()].push_back(index);
    // The first reader on the destination; none: only the results need it.
    Operation *first = nullptr;
    for (Operation *user : transfer.value.getUsers())
      if (user != terminator && placement_[user].ranks.count(transfer.to) &&
          (!first || runsBefore(user, first)))
        first = user;
    if (first && placement_[first].action)
      receivesFor[{transfer.to, *placement_[first].action}].push_back(index);
    else
      stepReceivesFor[{transfer.to, first ? first : terminator}].push_back(
          index);
  }

  program_.streams.assign(ranks_, {});
  program_.actions.assign(ranks_, {});
  std::set<int64_t> received;
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    std::vector<StageItem> &stream = program_.streams[rank];
    auto span = [&](std::string name, size_t first) {
      if (stream.size() > first)
        program_.actions[rank].push_back(
            {std::move(name), first, stream.size() - first});
    };
    auto receive = [&](const SmallVector<int64_t> &transfers) {
      for (int64_t transfer : transfers)
        if (received.insert(transfer).second)
          stream.push_back({StageItem::Kind::Recv, nullptr, transfer});
    };
    auto emitOp = [&](Operation *op) {
      stream.push_back({StageItem::Kind::Op, op, -1});
    };
    auto sendFrom = [&](Operation *op) {
      for (int64_t transfer : sendsAfter.lookup(op))
        if (program_.transfers[transfer].from == rank)
          stream.push_back({StageItem::Kind::Send, nullptr, transfer});
    };
    for (const PipelineAction &action : schedule[rank]) {
      ActionKey key{ActionKey::Phase::Forward, action.microBatch,
                    action.chunk * ranks_ + rank};
      switch (action.kind) {
      case PipelineAction::Kind::RecvActivation:
        receive(receivesFor[{rank, key}]);
        break;
      case PipelineAction::Kind::RecvGradient:
        key.phase = ActionKey::Phase::Backward;
        receive(receivesFor[{rank, key}]);
        break;
      case PipelineAction::Kind::Forward:
      case PipelineAction::Kind::Backward:
      case PipelineAction::Kind::WeightGradient: {
        key = *keyOf(action, rank, ranks_);
        size_t first = stream.size();
        receive(receivesFor[{rank, key}]);
        const SmallVector<Operation *> &ops = actionOps[key];
        for (Operation *op : ops)
          emitOp(op);
        for (Operation *op : ops)
          sendFrom(op);
        span(action.toString(), first);
        break;
      }
      case PipelineAction::Kind::SendActivation:
      case PipelineAction::Kind::SendGradient:
        break; // Sent right after the action that made the values.
      }
    }
    size_t first = stream.size();
    for (Operation *op : stepOps[rank]) {
      receive(stepReceivesFor[{rank, op}]);
      emitOp(op);
      sendFrom(op);
    }
    receive(stepReceivesFor[{rank, terminator}]);
    span("step", first);
  }
  // Every action op must have been emitted by the schedule.
  for (auto &[key, ops] : actionOps) {
    int64_t rank = rankOf(key.virtualStage);
    bool scheduled = llvm::any_of(schedule[rank], [&](const auto &action) {
      std::optional<ActionKey> scheduledKey = keyOf(action, rank, ranks_);
      return scheduledKey && !(*scheduledKey < key) && !(key < *scheduledKey);
    });
    if (!scheduled)
      return ops.front()->emitOpError()
             << "belongs to no action of the schedule (micro-batch "
             << key.microBatch << ", virtual stage " << key.virtualStage << ")";
  }
  return success();
}

void Splitter::findCompletions() {
  // A rank runs its stream in order and stops at the first op reading a
  // received value until it has arrived. So when rank q sends anything
  // after that op, q has received the value; when the original sender gets
  // that later transfer, its own send has completed.
  size_t count = program_.transfers.size();
  std::vector<size_t> sentAt(count), receivedAt(count);
  std::vector<size_t> firstReadAt(count, SIZE_MAX);
  std::map<std::pair<int64_t, void *>, int64_t> incoming; // (rank, value)
  for (auto [index, transfer] : llvm::enumerate(program_.transfers))
    incoming[{transfer.to, transfer.value.getAsOpaquePointer()}] = index;
  for (auto [rank, stream] : llvm::enumerate(program_.streams))
    for (auto [position, item] : llvm::enumerate(stream)) {
      if (item.kind == StageItem::Kind::Send)
        sentAt[item.transfer] = position;
      if (item.kind == StageItem::Kind::Recv)
        receivedAt[item.transfer] = position;
      if (item.kind != StageItem::Kind::Op)
        continue;
      for (Value operand : item.op->getOperands()) {
        auto it = incoming.find(
            {static_cast<int64_t>(rank), operand.getAsOpaquePointer()});
        if (it != incoming.end())
          firstReadAt[it->second] = std::min(firstReadAt[it->second], position);
      }
    }
  std::map<std::pair<int64_t, int64_t>, SmallVector<int64_t>> byRanks;
  for (auto [index, transfer] : llvm::enumerate(program_.transfers))
    byRanks[{transfer.from, transfer.to}].push_back(index);
  for (auto [index, transfer] : llvm::enumerate(program_.transfers)) {
    if (firstReadAt[index] == SIZE_MAX)
      continue; // Read by no op there: received by the end of the step.
    for (int64_t back : byRanks[{transfer.to, transfer.from}])
      if (sentAt[back] > firstReadAt[index] &&
          receivedAt[back] > sentAt[index] &&
          (transfer.completedBy < 0 ||
           receivedAt[back] < receivedAt[transfer.completedBy]))
        transfer.completedBy = back;
  }
}

FailureOr<PipelineProgram> Splitter::run() {
  std::string error;
  std::optional<PipelineStreams> schedule =
      buildSchedule(config_.kind, config_.shape, &error);
  if (!schedule)
    return step_.emitError() << "pipeline schedule: " << error;
  if (!simulateSchedule(*schedule, config_.shape, PipelineCosts(), &error))
    return step_.emitError() << "pipeline schedule: " << error;
  if (static_cast<int64_t>(config_.layers.size()) !=
      config_.shape.virtualStages())
    return step_.emitError()
           << "expected layers for " << config_.shape.virtualStages()
           << " virtual stages, found " << config_.layers.size();
  for (const std::vector<PipelineAction> &stream : *schedule)
    for (const PipelineAction &action : stream)
      splitsBackward_ |= action.kind == PipelineAction::Kind::WeightGradient;
  if (failed(placeActionOps()))
    return failure();
  placeStepOps();
  placeArgumentsAndResults();
  for (int64_t rank = 0; rank < ranks_; ++rank)
    for (auto [position, action] : llvm::enumerate((*schedule)[rank]))
      if (std::optional<ActionKey> key = keyOf(action, rank, ranks_))
        schedulePosition_[*key] = position;
  sendInPieces();
  if (failed(buildStreams(*schedule)) ||
      failed(verifyPipelineProgram(step_, program_)))
    return failure();
  findCompletions();
  return std::move(program_);
}

} // namespace

FailureOr<PipelineProgram> splitPipeline(func::FuncOp step,
                                         const PipelineConfig &config) {
  if (!llvm::hasSingleElement(step.getBody()))
    return step.emitError("expected a function with a single block");
  return Splitter(step, config).run();
}

} // namespace trellis
