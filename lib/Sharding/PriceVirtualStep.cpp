//===- PriceVirtualStep.cpp - Each pipeline rank's share of a step --------===//
//
// Places the written-down partitioned step on pipeline ranks by the rules
// of the pipeline split (lib/Pipeline/StagePlacement.cpp and
// StageTransfers.cpp): an op of a micro-batch on its virtual stage's rank,
// an op of the step on every rank that reads it, values read on another
// rank sent there (a micro-batch's once per micro-batch), values replicated
// over the piece axis sent in pieces and gathered on arrival. Then sums what
// each rank runs.
//
//===----------------------------------------------------------------------===//

#include "VirtualStep.h"

#include "trellis/Dialect/Graph/IR/GraphDialect.h"
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

using RankSet = std::set<int64_t>;

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
  void placeActions();
  void placeStepOps();
  void holdArguments();
  void sendInPieces();
  void addTransfers();
  /// Records a transfer of `value` to `rank` unless it is made there.
  void requireOn(int64_t value, int64_t rank);
  void charge(const VirtualOp &op, const RankSet &ranks);
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
  std::vector<RankSet> resultRanks_;
  std::set<std::pair<int64_t, int64_t>> transferred_;
  std::vector<ShardedStepCost> costs_;
};

std::vector<SmallVector<int64_t>> Pricer::readers() const {
  std::vector<SmallVector<int64_t>> readers(written_.values.size());
  for (auto [index, op] : llvm::enumerate(written_.ops))
    if (!op.erased)
      for (int64_t operand : op.operands)
        readers[operand].push_back(index);
  return readers;
}

void Pricer::placeActions() {
  placement_.assign(written_.ops.size(), {});
  for (auto [index, op] : llvm::enumerate(written_.ops)) {
    if (!op.action || op.erased)
      continue;
    // A micro-batch's value joins its step total in the action that made it.
    if (op.accumulates && !op.operands.empty()) {
      int64_t producer = written_.values[op.operands[0]].producer;
      if (producer >= 0 && written_.ops[producer].action)
        op.virtualStage = written_.ops[producer].virtualStage;
    }
    placement_[index] = {op.virtualStage % ranks_};
  }
}

void Pricer::placeStepOps() {
  std::vector<SmallVector<int64_t>> readers = this->readers();
  // Ranks that read each argument inside micro-batches.
  auto actionReaders = [&](int64_t argument) {
    RankSet ranks;
    for (int64_t reader : readers[written_.arguments[argument]])
      if (written_.ops[reader].action)
        ranks.insert(placement_[reader].begin(), placement_[reader].end());
    return ranks;
  };
  // What each result needs: an update or gradient where its parameter is
  // used, the loss on rank 0 (which reports it).
  size_t numResults = written_.results.size();
  std::vector<RankSet> resultNeeds(numResults);
  for (size_t i = 0; i < numResults; ++i) {
    IntegerAttr argument = step_.getResultAttrOfType<IntegerAttr>(
        i, graph::GraphDialect::kUpdatesAttrName);
    if (!argument)
      argument = step_.getResultAttrOfType<IntegerAttr>(i, "graph.gradient_of");
    if (!argument) {
      resultNeeds[i] = {0};
      continue;
    }
    if (argument.getInt() >= 0 &&
        argument.getInt() < static_cast<int64_t>(written_.arguments.size()))
      resultNeeds[i] = actionReaders(argument.getInt());
  }
  // Step ops, last first: every rank a reader runs on, or that needs the
  // result they return.
  std::vector<SmallVector<size_t>> returnedAs(written_.values.size());
  for (auto [i, value] : llvm::enumerate(written_.results))
    returnedAs[value].push_back(i);
  for (int64_t index = static_cast<int64_t>(written_.ops.size()) - 1;
       index >= 0; --index) {
    const VirtualOp &op = written_.ops[index];
    if (op.action || op.erased)
      continue;
    RankSet ranks;
    for (int64_t result : op.results) {
      for (size_t i : returnedAs[result])
        ranks.insert(resultNeeds[i].begin(), resultNeeds[i].end());
      for (int64_t reader : readers[result])
        ranks.insert(placement_[reader].begin(), placement_[reader].end());
    }
    if (ranks.empty())
      ranks = {0};
    placement_[index] = std::move(ranks);
  }
  resultRanks_.assign(numResults, {});
  for (size_t i = 0; i < numResults; ++i) {
    resultRanks_[i] = resultNeeds[i];
    if (resultRanks_[i].empty()) {
      int64_t producer = written_.values[written_.results[i]].producer;
      resultRanks_[i] = producer >= 0 ? placement_[producer] : RankSet{0};
    }
  }
}

void Pricer::holdArguments() {
  std::vector<SmallVector<int64_t>> readers = this->readers();
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
    // Held where it is read, and where a result that updates it lives.
    RankSet holders;
    for (int64_t reader : readers[value])
      holders.insert(placement_[reader].begin(), placement_[reader].end());
    for (size_t i = 0; i < written_.results.size(); ++i)
      if (auto updates = step_.getResultAttrOfType<IntegerAttr>(
              i, graph::GraphDialect::kUpdatesAttrName);
          updates && updates.getInt() == static_cast<int64_t>(number))
        holders.insert(resultRanks_[i].begin(), resultRanks_[i].end());
    if (holders.empty())
      holders = {0};
    for (int64_t rank : holders)
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
    StepReport::Traffic &traffic =
        costs_[at].communication[end + options_.pipelineAxis];
    traffic.count += count;
    traffic.bytes += bytes;
    traffic.wireBytes += bytes;
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

void Pricer::charge(const VirtualOp &op, const RankSet &ranks) {
  int64_t count = times(op);
  for (int64_t rank : ranks) {
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
  placeActions();
  placeStepOps();
  holdArguments();
  sendInPieces();
  addTransfers();
  for (auto [op, ranks] : llvm::zip(written_.ops, placement_))
    if (!op.erased)
      charge(op, ranks);
  return std::move(costs_);
}

} // namespace

std::vector<ShardedStepCost> priceVirtualStep(func::FuncOp step, MeshAttr mesh,
                                              VirtualStep &virtualStep,
                                              const CostQueryOptions &options) {
  return Pricer(step, mesh, virtualStep, options).run();
}

} // namespace trellis::sharding
