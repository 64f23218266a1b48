//===- PriceVirtualStep.cpp - Each pipeline rank's share of a step --------===//
//
// Places the written-down partitioned step on pipeline ranks by the rules
// the pipeline split places by (RankPlacement.h) and adds the transfers of
// lib/Pipeline/StageTransfers.cpp: values read on another
// rank sent there (a micro-batch's once per micro-batch), values replicated
// over the piece axis sent in pieces and gathered on arrival. Then sums what
// each rank runs.
//
//===----------------------------------------------------------------------===//

#include "VirtualStep.h"

#include "CollectiveSchedule.h"

#include "trellis/Analysis/RankPlacement.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

#include <map>

using namespace mlir;

namespace trellis::sharding {

int64_t HeldValue::bytes() const {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count * ((elementType.getIntOrFloatBitWidth() + 7) / 8);
}

namespace {

class Pricer {
public:
  Pricer(func::FuncOp step, MeshAttr mesh, VirtualStep &virtualStep,
         const CostQueryOptions &options)
      : step_(step), mesh_(mesh), written_(virtualStep), options_(options) {
    if (auto count = step->getAttrOfType<IntegerAttr>(
            graph::GraphDialect::kMicroBatchesAttrName))
      microBatches_ = count.getInt();
    if (auto stages = step->getAttrOfType<IntegerAttr>(
            TrellisDialect::kPipelineStagesAttrName))
      ranks_ = stages.getInt();
  }

  std::vector<ShardedStepCost> run();

private:
  int64_t times(const VirtualOp &op) const {
    return op.action ? microBatches_ : 1;
  }
  /// Places every op, result and argument on pipeline ranks.
  void place();
  /// Charges each rank the parameters and optimizer states it holds.
  void holdArguments();
  void sendInPieces();
  void addTransfers();
  /// Records a transfer of `value` to `rank` unless it is made there.
  void requireOn(int64_t value, int64_t rank);
  /// Charges op `index` to `ranks`: its work (what the time model prices)
  /// and its FLOPs, bytes and traffic (as StepReport counts them).
  void charge(int64_t index, const RankSet &ranks);
  /// An op whose result the runtime's memory plan places in its operand's
  /// bytes (a reshape, by its op contract): its kernel moves nothing. An
  /// accumulated total is written more than once and is copied instead.
  bool movesNothing(const VirtualOp &op) const;
  /// Adds `calls` executions of `op`'s kind (or of `collective`, a
  /// transfer's key) to `rank`'s work.
  void addWork(int64_t rank, const VirtualOp &op, llvm::StringRef collective,
               int64_t calls, const OpCost &cost,
               const StepReport::Traffic &traffic, bool hidden = false);
  /// Which collectives run beside compute-bound work of their action once
  /// -trellis-schedule-collectives has placed them (CollectiveSchedule.h).
  void findHiddenCollectives();
  /// The activations each micro-batch keeps for its backward, and the
  /// gradients it hands to the step.
  void holdActivations();
  PricedWork::Phase phaseOf(const VirtualOp &op) const;
  /// Ops that read each value, in order.
  std::vector<SmallVector<int64_t>> readers() const;

  func::FuncOp step_;
  MeshAttr mesh_;
  VirtualStep &written_;
  const CostQueryOptions &options_;
  int64_t microBatches_ = 1;
  int64_t ranks_ = 1;
  /// Where each op runs.
  std::vector<RankSet> placement_;
  std::vector<RankSet> resultRanks_, argumentRanks_;
  std::set<std::pair<int64_t, int64_t>> transferred_;
  std::vector<ShardedStepCost> costs_;
  /// Per op: a collective that compute hides (findHiddenCollectives).
  std::vector<bool> hidden_;
  /// Each rank's work items by what merges them.
  using WorkKey = std::tuple<int, int64_t, std::string, std::string, int64_t,
                             int64_t, int64_t, bool, bool>;
  std::vector<std::map<WorkKey, size_t>> workIndex_;
};

PricedWork::Phase Pricer::phaseOf(const VirtualOp &op) const {
  if (!op.action)
    return PricedWork::Phase::Step;
  auto phase = op.origin ? op.origin->getAttrOfType<StringAttr>(
                               graph::GraphDialect::kPhaseAttrName)
                         : StringAttr();
  if (phase && phase.getValue() == "forward")
    return PricedWork::Phase::Forward;
  if (phase && phase.getValue() == "weight")
    return PricedWork::Phase::Weight;
  return PricedWork::Phase::Backward;
}

void Pricer::addWork(int64_t rank, const VirtualOp &op,
                     llvm::StringRef collective, int64_t calls,
                     const OpCost &cost, const StepReport::Traffic &traffic,
                     bool hidden) {
  PricedWork work;
  work.phase = phaseOf(op);
  work.chunk = op.action ? op.virtualStage / ranks_ : 0;
  if (!collective.empty()) {
    work.name = collective.str();
    work.hidden = hidden;
  } else {
    if (op.kernel.empty())
      return; // a reshard step that keeps a piece: nothing runs
    work.name = op.kernel.str();
    if (!op.operands.empty())
      if (auto element =
              graph::toElementType(written_.values[op.operands[0]].elementType))
        work.dtype = elementTypeName(*element);
    work.gemmRows = op.gemmRows;
    work.gemmColumns = op.gemmColumns;
    work.gemmDepth = op.gemmDepth;
    if (op.origin)
      if (auto causal = op.origin->getAttrOfType<BoolAttr>("causal"))
        work.causal = causal.getValue();
  }
  WorkKey key{static_cast<int>(work.phase),
              work.chunk,
              work.name,
              work.dtype,
              work.gemmRows,
              work.gemmColumns,
              work.gemmDepth,
              work.causal,
              work.hidden};
  auto [found, inserted] =
      workIndex_[rank].try_emplace(key, costs_[rank].work.size());
  if (inserted)
    costs_[rank].work.push_back(std::move(work));
  PricedWork &merged = costs_[rank].work[found->second];
  merged.calls += calls;
  merged.flops += cost.flops;
  merged.bytesRead += cost.bytesRead;
  merged.bytesWritten += cost.bytesWritten;
  merged.traffic.count += traffic.count;
  merged.traffic.bytes += traffic.bytes;
  merged.traffic.wireBytes += traffic.wireBytes;
}

void Pricer::holdActivations() {
  std::vector<SmallVector<int64_t>> readers = this->readers();
  int64_t chunks = 1;
  for (const VirtualOp &op : written_.ops)
    if (op.action && !op.erased)
      chunks = std::max(chunks, op.virtualStage / ranks_ + 1);
  for (ShardedStepCost &cost : costs_) {
    cost.savedActivationBytes.assign(chunks, 0);
    cost.weightGradientInputBytes.assign(chunks, 0);
  }
  for (auto [index, op] : llvm::enumerate(written_.ops)) {
    if (op.erased || !op.action || placement_[index].empty())
      continue;
    PricedWork::Phase phase = phaseOf(op);
    int64_t rank = *placement_[index].begin();
    for (int64_t result : op.results) {
      bool keptForBackward = false, handedToStep = false,
           keptForWeights = false;
      for (int64_t reader : readers[result]) {
        const VirtualOp &user = written_.ops[reader];
        if (!user.action)
          handedToStep = true;
        else if (phase == PricedWork::Phase::Forward &&
                 phaseOf(user) != PricedWork::Phase::Forward)
          keptForBackward = true;
        else if (phase == PricedWork::Phase::Backward &&
                 phaseOf(user) == PricedWork::Phase::Weight)
          keptForWeights = true;
      }
      int64_t bytes = written_.values[result].bytes();
      int64_t chunk = op.virtualStage / ranks_;
      if (keptForBackward)
        costs_[rank].savedActivationBytes[chunk] += bytes;
      if (keptForWeights)
        costs_[rank].weightGradientInputBytes[chunk] += bytes;
      if (handedToStep && phase != PricedWork::Phase::Forward)
        costs_[rank].gradientBytes += bytes;
    }
  }
}

std::vector<SmallVector<int64_t>> Pricer::readers() const {
  std::vector<SmallVector<int64_t>> readers(written_.values.size());
  for (auto [index, op] : llvm::enumerate(written_.ops))
    if (!op.erased)
      for (int64_t operand : op.operands)
        readers[operand].push_back(index);
  return readers;
}

void Pricer::place() {
  // The step as the shared placement rules see it (RankPlacement.h):
  // erased ops take no part.
  std::vector<SmallVector<int64_t>> readers = this->readers();
  std::vector<int64_t> problemIndex(written_.ops.size(), -1);
  std::vector<int64_t> opOf;
  for (auto [index, op] : llvm::enumerate(written_.ops))
    if (!op.erased) {
      problemIndex[index] = static_cast<int64_t>(opOf.size());
      opOf.push_back(static_cast<int64_t>(index));
    }
  auto mapped = [&](ArrayRef<int64_t> ops) {
    std::vector<int64_t> indices;
    for (int64_t op : ops)
      indices.push_back(problemIndex[op]);
    return indices;
  };
  std::vector<SmallVector<int64_t>> returnedAs(written_.values.size());
  for (auto [i, value] : llvm::enumerate(written_.results))
    returnedAs[value].push_back(static_cast<int64_t>(i));
  PlacementProblem problem;
  problem.ranks = ranks_;
  for (int64_t index : opOf) {
    const VirtualOp &op = written_.ops[index];
    PlacementOp placed;
    placed.action = op.action;
    placed.virtualStage = op.virtualStage;
    // A micro-batch sum runs where its summand is made (a
    // matmul_accumulate, with its phase, where its stage says).
    if (op.accumulates && !op.operands.empty() && op.origin &&
        llvm::isa<graph::MicrobatchSumOp>(op.origin)) {
      int64_t producer = written_.values[op.operands[0]].producer;
      if (producer >= 0)
        placed.summed = problemIndex[producer];
    }
    for (int64_t result : op.results) {
      for (int64_t reader : mapped(readers[result]))
        placed.readers.push_back(reader);
      placed.returnedAs.insert(placed.returnedAs.end(),
                               returnedAs[result].begin(),
                               returnedAs[result].end());
    }
    for (int64_t operand : op.operands)
      if (int64_t producer = written_.values[operand].producer; producer >= 0)
        placed.producers.push_back(problemIndex[producer]);
    placed.scalarResults =
        !op.results.empty() && llvm::all_of(op.results, [&](int64_t result) {
          return written_.values[result].shape.empty();
        });
    problem.ops.push_back(std::move(placed));
  }
  for (int64_t value : written_.arguments)
    problem.argumentReaders.push_back(mapped(readers[value]));
  for (size_t i = 0; i < written_.results.size(); ++i) {
    int64_t producer = written_.values[written_.results[i]].producer;
    int64_t producerIndex = producer >= 0 ? problemIndex[producer] : -1;
    graph::ResultArgument argument = graph::getResultArgument(step_, i);
    problem.results.push_back(
        {producerIndex, argument.argument, argument.updates});
  }
  RankPlacement placement = placeOnRanks(problem);
  placement_.assign(written_.ops.size(), {});
  for (auto [i, index] : llvm::enumerate(opOf)) {
    placement_[index] = placement.opRanks[i];
    written_.ops[index].virtualStage = placement.virtualStages[i];
  }
  resultRanks_ = std::move(placement.resultRanks);
  argumentRanks_ = std::move(placement.argumentRanks);
}

void Pricer::holdArguments() {
  costs_.assign(ranks_, {});
  for (auto [number, value] : llvm::enumerate(written_.arguments)) {
    auto role = step_.getArgAttrOfType<StringAttr>(
        number, graph::GraphDialect::kRoleAttrName);
    if (!role)
      continue;
    bool parameter = role.getValue() == "param";
    bool state = isOptimizerStateRole(role.getValue());
    if (!parameter && !state)
      continue;
    for (int64_t rank : argumentRanks_[number])
      (parameter ? costs_[rank].parameterBytes
                 : costs_[rank].optimizerStateBytes) +=
          written_.values[value].bytes();
  }
}

void Pricer::sendInPieces() {
  if (options_.pieceAxis.empty() || !mesh_ || ranks_ < 2)
    return;
  std::optional<size_t> axis = mesh_.getAxisIndex(options_.pieceAxis);
  if (!axis)
    return;
  int64_t pieces = mesh_.getAxes()[*axis].getSize();
  if (pieces < 2)
    return;
  StringAttr pieceAxis =
      StringAttr::get(step_.getContext(), options_.pieceAxis);
  std::vector<SmallVector<int64_t>> readers = this->readers();
  size_t producers = written_.ops.size();
  for (size_t producer = 0; producer < producers; ++producer) {
    const VirtualOp &made = written_.ops[producer];
    if (!made.action || made.accumulates || !made.laidOut || made.erased ||
        made.results.size() != 1)
      continue;
    int64_t value = made.results[0];
    const HeldValue &held = written_.values[value];
    if (held.layout.usesAxis(pieceAxis) || !held.elementType.isF32())
      continue;
    // Cut along the last dimension that divides.
    std::optional<size_t> dim;
    for (int64_t d = static_cast<int64_t>(held.shape.size()) - 1;
         d >= 0 && !dim; --d)
      if (held.shape[d] % pieces == 0)
        dim = d;
    if (!dim)
      continue;
    // Readers of the micro-batch on each other rank.
    int64_t from = *placement_[producer].begin();
    std::map<int64_t, SmallVector<int64_t>> remote;
    for (int64_t reader : readers[value]) {
      if (!written_.ops[reader].action)
        continue;
      int64_t rank = *placement_[reader].begin();
      if (rank != from)
        remote[rank].push_back(reader);
    }
    if (remote.empty())
      continue;
    // The piece this rank keeps (a slice_shard: no data moves)...
    HeldValue piece = held;
    piece.shape[*dim] /= pieces;
    piece.producer = static_cast<int64_t>(written_.ops.size());
    VirtualOp slice;
    slice.origin = made.origin;
    slice.action = true;
    slice.virtualStage = made.virtualStage;
    slice.operands = {value};
    written_.values.push_back(piece);
    slice.results = {static_cast<int64_t>(written_.values.size()) - 1};
    int64_t pieceValue = slice.results[0];
    written_.ops.push_back(std::move(slice));
    placement_.push_back(placement_[producer]);
    // ...gathered again on each rank that reads it.
    int64_t pieceBytes = written_.values[pieceValue].bytes();
    int64_t wholeBytes = written_.values[value].bytes();
    for (auto &[rank, users] : remote) {
      VirtualOp gather;
      gather.origin = made.origin;
      gather.action = true;
      gather.operands = {pieceValue};
      gather.collective = "all_gather over " + options_.pieceAxis;
      gather.traffic = {
          1, pieceBytes,
          ringWireBytes("all_gather", pieces, pieceBytes, wholeBytes)};
      HeldValue whole = written_.values[value];
      whole.producer = static_cast<int64_t>(written_.ops.size());
      written_.values.push_back(std::move(whole));
      int64_t gathered = static_cast<int64_t>(written_.values.size()) - 1;
      gather.results = {gathered};
      written_.ops.push_back(std::move(gather));
      placement_.push_back({rank});
      for (int64_t user : users)
        for (int64_t &operand : written_.ops[user].operands)
          if (operand == value)
            operand = gathered;
    }
  }
}

void Pricer::requireOn(int64_t value, int64_t rank) {
  int64_t producer = written_.values[value].producer;
  if (producer < 0 || placement_[producer].count(rank) ||
      !transferred_.insert({value, rank}).second)
    return;
  const VirtualOp &made = written_.ops[producer];
  int64_t count = made.action && !made.accumulates ? microBatches_ : 1;
  int64_t bytes = written_.values[value].bytes() * count;
  for (auto [end, at] : {std::pair<const char *, int64_t>{
                             "send over ", *placement_[producer].begin()},
                         {"recv over ", rank}}) {
    std::string key = end + options_.pipelineAxis;
    StepReport::Traffic &traffic = costs_[at].communication[key];
    traffic.count += count;
    traffic.bytes += bytes;
    traffic.wireBytes += bytes;
    // The time model's transfer: one per execution of the producer; a
    // total (an accumulation's result) leaves once, after every
    // micro-batch, as a transfer of the step.
    int64_t once = written_.values[value].bytes();
    VirtualOp ofStep;
    ofStep.origin = made.origin;
    addWork(at, made.accumulates ? ofStep : made, key, 1, OpCost(),
            {1, once, once});
  }
}

void Pricer::addTransfers() {
  for (auto [index, op] : llvm::enumerate(written_.ops))
    for (int64_t rank : op.erased ? RankSet() : placement_[index])
      for (int64_t operand : op.operands)
        requireOn(operand, rank);
  for (auto [i, value] : llvm::enumerate(written_.results))
    for (int64_t rank : resultRanks_[i])
      requireOn(value, rank);
}

bool Pricer::movesNothing(const VirtualOp &op) const {
  const OpContract *contract =
      op.kernel.empty() ? nullptr : findOpContract(op.kernel.str());
  if (!contract || !contract->effects.sharesOperandBytes || op.operands.empty())
    return false;
  int64_t producer = written_.values[op.operands[0]].producer;
  return producer < 0 || !written_.ops[producer].accumulates;
}

void Pricer::findHiddenCollectives() {
  hidden_.assign(written_.ops.size(), false);
  if (!options_.scheduleCollectives)
    return;
  // The ops in program order: a lowering's at the place of the op they
  // replace.
  std::vector<int64_t> program;
  for (auto [index, op] : llvm::enumerate(written_.ops))
    if (!op.erased)
      program.push_back(static_cast<int64_t>(index));
  auto place = [&](int64_t index) {
    int64_t replaced = written_.ops[index].replaces;
    return replaced >= 0 ? replaced : index;
  };
  std::stable_sort(program.begin(), program.end(),
                   [&](int64_t a, int64_t b) { return place(a) < place(b); });
  std::vector<ScheduledOp> ops;
  std::vector<int64_t> actions;
  for (int64_t index : program) {
    const VirtualOp &op = written_.ops[index];
    ScheduledOp scheduled;
    scheduled.reads.assign(op.operands.begin(), op.operands.end());
    scheduled.writes.assign(op.results.begin(), op.results.end());
    auto phase = op.origin ? op.origin->getAttrOfType<StringAttr>(
                                 graph::GraphDialect::kPhaseAttrName)
                           : StringAttr();
    scheduled.group = phaseGroup(phase ? phase.getValue() : "");
    // Its kernel communicates where the partitioner will give it axes: we
    // take any split operand for that (a batch-split cross-entropy gets
    // none, so this over-approximates).
    const OpContract *contract =
        op.kernel.empty() ? nullptr : findOpContract(op.kernel.str());
    bool split = llvm::any_of(op.operands, [&](int64_t operand) {
      return !written_.values[operand].layout.isReplicated();
    });
    auto attribute = [&](const std::string &name) -> std::string {
      auto text =
          op.origin ? op.origin->getAttrOfType<StringAttr>(name) : StringAttr();
      return text ? text.getValue().str() : "";
    };
    if (!op.collective.empty() || (op.reshardStep && op.kernel.empty()))
      scheduled.kind = ScheduledOp::Kind::Collective;
    else if (kernelCommunicates(contract, split, attribute))
      scheduled.kind = ScheduledOp::Kind::Fence;
    else
      scheduled.heavy = isComputeBound(op.cost);
    // An action: one virtual stage's phase, the weight gradients apart
    // when the schedule runs them apart.
    PricedWork::Phase actionPhase = phaseOf(op);
    if (actionPhase == PricedWork::Phase::Weight &&
        !options_.splitWeightGradients)
      actionPhase = PricedWork::Phase::Backward;
    actions.push_back(op.action ? op.virtualStage * 4 +
                                      static_cast<int64_t>(actionPhase)
                                : -1);
    ops.push_back(std::move(scheduled));
  }
  std::vector<int64_t> order = scheduleCollectives(ops);
  std::vector<bool> hidden = hiddenCollectives(ops, order, actions);
  for (auto [i, index] : llvm::enumerate(program))
    hidden_[index] = hidden[i];
}

void Pricer::charge(int64_t index, const RankSet &ranks) {
  const VirtualOp &op = written_.ops[index];
  int64_t count = times(op);
  OpCost workCost = op.cost;
  if (movesNothing(op))
    workCost.bytesRead = workCost.bytesWritten = 0;
  for (int64_t rank : ranks) {
    addWork(rank, op, op.collective, 1, workCost, op.traffic, hidden_[index]);
    ShardedStepCost &cost = costs_[rank];
    cost.flops += op.cost.flops * count;
    cost.bytesRead += op.cost.bytesRead * count;
    cost.bytesWritten += op.cost.bytesWritten * count;
    if (op.collective.empty())
      continue;
    StepReport::Traffic &traffic = cost.communication[op.collective];
    traffic.count += op.traffic.count * count;
    traffic.bytes += op.traffic.bytes * count;
    traffic.wireBytes += op.traffic.wireBytes * count;
  }
}

std::vector<ShardedStepCost> Pricer::run() {
  place();
  holdArguments();
  workIndex_.assign(ranks_, {});
  sendInPieces();
  addTransfers();
  findHiddenCollectives();
  for (auto [index, op] : llvm::enumerate(written_.ops))
    if (!op.erased)
      charge(static_cast<int64_t>(index), placement_[index]);
  holdActivations();
  return std::move(costs_);
}

} // namespace

std::vector<ShardedStepCost> priceVirtualStep(func::FuncOp step, MeshAttr mesh,
                                              VirtualStep &virtualStep,
                                              const CostQueryOptions &options) {
  return Pricer(step, mesh, virtualStep, options).run();
}

} // namespace trellis::sharding
