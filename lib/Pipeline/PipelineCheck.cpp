//===- PipelineCheck.cpp - Pipeline programs proven runnable --------------===//
//
// Checks a split step at the level of its programs and schedules, never
// per op and micro-batch, so that the work follows the program plus the
// schedule: every transfer has one send and one receive in programs of its
// kind; every program reads values made before it on its rank in the same
// micro-batch, received there, or held there; the schedules, run together
// (each rank in order, sends never blocking, an action waiting for the
// transfers it reads), reach their ends; every result ends on the ranks
// that hold it.
//
//===----------------------------------------------------------------------===//

#include "trellis/Pipeline/PipelineSplit.h"

#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/ADT/DenseSet.h"

#include <map>
#include <set>

using namespace mlir;

namespace trellis {

namespace {

/// Where a rank gets a value from.
struct Source {
  /// The program that makes or receives it, and the item's position there.
  int64_t program = -1;
  size_t item = 0;
  /// A total over micro-batches (graph.microbatch_sum): made by a program
  /// of the micro-batch, a value of the step.
  bool total = false;
};

class Checker {
public:
  Checker(Operation *anchor, const PipelineProgram &program)
      : anchor_(anchor), program_(program), ranks_(program.ranks()) {}

  LogicalResult run();

private:
  LogicalResult checkTransfers();
  LogicalResult checkSchedules();
  LogicalResult checkDataflow(int64_t rank);
  LogicalResult simulate();
  LogicalResult checkResults();

  bool isStep(int64_t rank, int64_t program) const {
    return program_.programs[rank][program].kind == ActionKind::Step;
  }
  /// Whether program `a` runs before program `b` on `rank` for every
  /// micro-batch.
  bool alwaysBefore(int64_t rank, int64_t a, int64_t b);
  /// The op or step to attach a diagnostic to.
  InFlightDiagnostic error(const StageItem &item) {
    return item.op ? item.op->emitOpError() : anchor_->emitError();
  }

  Operation *anchor_;
  const PipelineProgram &program_;
  int64_t ranks_;
  /// position_[rank][program][micro-batch]: index in the rank's schedule
  /// (the step program's under micro-batch 0).
  std::vector<std::vector<std::vector<int64_t>>> position_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, bool> before_;
  /// Per rank, where each value comes from.
  std::vector<llvm::DenseMap<Value, Source>> sources_;
  /// Per rank and program: the transfers it waits for (received values it
  /// reads) and those it sends.
  std::vector<std::vector<std::set<int64_t>>> waits_, sends_;
};

LogicalResult Checker::checkTransfers() {
  size_t count = program_.transfers.size();
  std::vector<int> sends(count, 0), receives(count, 0);
  for (int64_t rank = 0; rank < ranks_; ++rank)
    for (const ActionProgram &program : program_.programs[rank])
      for (const StageItem &item : program.items) {
        if (item.kind == StageItem::Kind::Op)
          continue;
        if (item.transfer < 0 || item.transfer >= static_cast<int64_t>(count))
          return anchor_->emitError()
                 << "pipeline rank " << rank << " names transfer "
                 << item.transfer << ", outside the step's " << count;
        const StageTransfer &transfer = program_.transfers[item.transfer];
        bool sending = item.kind == StageItem::Kind::Send;
        if ((sending ? transfer.from : transfer.to) != rank)
          return anchor_->emitError()
                 << "pipeline transfer " << item.transfer << " (rank "
                 << transfer.from << " to rank " << transfer.to << ") is "
                 << (sending ? "sent" : "received") << " by rank " << rank;
        if ((program.kind == ActionKind::Step) == transfer.perMicroBatch)
          return anchor_->emitError()
                 << "pipeline transfer " << item.transfer << " of "
                 << (transfer.perMicroBatch ? "a micro-batch" : "the step")
                 << " is " << (sending ? "sent" : "received") << " by the "
                 << program.name() << " program of rank " << rank;
        ++(sending ? sends : receives)[item.transfer];
      }
  for (size_t t = 0; t < count; ++t)
    if (sends[t] != 1 || receives[t] != 1)
      return anchor_->emitError() << "pipeline transfer " << t << " (rank "
                               << program_.transfers[t].from << " to rank "
                               << program_.transfers[t].to << ") is sent "
                               << sends[t] << " times and received "
                               << receives[t] << " times: expected once each";
  return success();
}

LogicalResult Checker::checkSchedules() {
  int64_t m = program_.microBatches;
  position_.assign(ranks_, {});
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    const std::vector<ActionProgram> &programs = program_.programs[rank];
    position_[rank].assign(programs.size(), std::vector<int64_t>(m, -1));
    const std::vector<ScheduledAction> &schedule = program_.schedule[rank];
    for (auto [index, entry] : llvm::enumerate(schedule)) {
      if (entry.program < 0 ||
          entry.program >= static_cast<int64_t>(programs.size()))
        return anchor_->emitError()
               << "the schedule of pipeline rank " << rank << " runs program "
               << entry.program << ", outside its " << programs.size();
      bool step = isStep(rank, entry.program);
      if (step ? entry.microBatch != -1 || index + 1 != schedule.size()
               : entry.microBatch < 0 || entry.microBatch >= m)
        return anchor_->emitError()
               << "the schedule of pipeline rank " << rank << " runs "
               << programs[entry.program].name() << " for micro-batch "
               << entry.microBatch << " at position " << index
               << ": expected micro-batches in [0, " << m
               << ") and the step program once, last";
      int64_t &at = position_[rank][entry.program][step ? 0 : entry.microBatch];
      if (at >= 0)
        return anchor_->emitError()
               << "the schedule of pipeline rank " << rank << " runs "
               << programs[entry.program].name() << " twice for micro-batch "
               << entry.microBatch;
      at = index;
    }
    for (auto [index, program] : llvm::enumerate(programs))
      for (int64_t mb = 0; mb < (program.kind == ActionKind::Step ? 1 : m);
           ++mb)
        if (position_[rank][index][mb] < 0)
          return anchor_->emitError()
                 << "the schedule of pipeline rank " << rank
                 << " never runs " << program.name()
                 << (program.kind == ActionKind::Step
                         ? std::string()
                         : " for micro-batch " + std::to_string(mb));
  }
  return success();
}

bool Checker::alwaysBefore(int64_t rank, int64_t a, int64_t b) {
  auto [it, inserted] = before_.try_emplace({rank, a, b}, true);
  if (!inserted)
    return it->second;
  if (isStep(rank, a) != isStep(rank, b)) {
    it->second = !isStep(rank, a);
    return it->second;
  }
  for (size_t mb = 0; mb < position_[rank][a].size() && it->second; ++mb)
    it->second = position_[rank][a][mb] < position_[rank][b][mb];
  return it->second;
}

LogicalResult Checker::checkDataflow(int64_t rank) {
  const std::vector<ActionProgram> &programs = program_.programs[rank];
  llvm::DenseMap<Value, Source> &sources = sources_[rank];
  llvm::DenseMap<Value, int64_t> receivedAs;
  for (auto [p, program] : llvm::enumerate(programs))
    for (auto [i, item] : llvm::enumerate(program.items)) {
      if (item.kind == StageItem::Kind::Op) {
        bool total = graph::makesStepTotal(item.op);
        for (Value result : item.op->getResults())
          sources.try_emplace(result, Source{static_cast<int64_t>(p), i, total});
      } else if (item.kind == StageItem::Kind::Recv) {
        Value value = program_.transfers[item.transfer].received;
        sources.try_emplace(value, Source{static_cast<int64_t>(p), i, false});
        receivedAs[value] = item.transfer;
      }
    }
  waits_[rank].assign(programs.size(), {});
  sends_[rank].assign(programs.size(), {});
  for (auto [p, program] : llvm::enumerate(programs)) {
    bool step = program.kind == ActionKind::Step;
    for (auto [i, item] : llvm::enumerate(program.items)) {
      if (item.kind == StageItem::Kind::Recv)
        continue;
      SmallVector<Value> reads;
      if (item.kind == StageItem::Kind::Send) {
        reads.push_back(program_.transfers[item.transfer].value);
        sends_[rank][p].insert(item.transfer);
      } else {
        reads.append(item.op->operand_begin(), item.op->operand_end());
      }
      for (Value value : reads) {
        if (llvm::isa<BlockArgument>(value))
          continue;
        auto it = sources.find(value);
        bool ok = it != sources.end();
        if (ok) {
          // A total is a value of the step; anything else is read in its
          // own program after it, or in a later action of the micro-batch.
          const Source &source = it->second;
          if (source.total)
            ok = step;
          else if (source.program == static_cast<int64_t>(p))
            ok = source.item < i;
          else
            ok = !step && !isStep(rank, source.program) &&
                 alwaysBefore(rank, source.program, p);
        }
        if (!ok) {
          InFlightDiagnostic diag = error(item);
          diag << "reads a value on pipeline rank " << rank << " in its "
               << program.name()
               << " program before it is made or received there in the "
               << (step ? "step" : "same micro-batch");
          diag.attachNote(value.getLoc()) << "the value";
          return failure();
        }
        if (auto received = receivedAs.find(value); received != receivedAs.end())
          waits_[rank][p].insert(received->second);
      }
    }
  }
  return success();
}

LogicalResult Checker::simulate() {
  int64_t m = program_.microBatches;
  size_t count = program_.transfers.size();
  // sent[t][mb] (micro-batch 0 for transfers of the step).
  std::vector<std::vector<bool>> sent(count);
  for (size_t t = 0; t < count; ++t)
    sent[t].assign(program_.transfers[t].perMicroBatch ? m : 1, false);
  auto isSent = [&](int64_t t, int64_t mb) {
    return sent[t][program_.transfers[t].perMicroBatch ? mb : 0];
  };
  // A program of a micro-batch sends at its end, so it runs whole once
  // what it reads has been sent; the step program runs item by item (it
  // sends totals first and receives later).
  std::vector<size_t> next(ranks_, 0), nextItem(ranks_, 0);
  // Per rank: the transfer received as each value.
  std::vector<llvm::DenseMap<Value, int64_t>> incoming(ranks_);
  for (auto [index, transfer] : llvm::enumerate(program_.transfers))
    incoming[transfer.to][transfer.received] = index;
  // The transfer an item waits for, if any.
  auto itemWaitsFor = [&](int64_t rank, const StageItem &item,
                          int64_t mb) -> std::optional<int64_t> {
    if (item.kind != StageItem::Kind::Op)
      return std::nullopt;
    for (Value operand : item.op->getOperands())
      if (auto it = incoming[rank].find(operand);
          it != incoming[rank].end() && !isSent(it->second, mb))
        return it->second;
    return std::nullopt;
  };
  auto blockedBy = [&](int64_t rank,
                       const ScheduledAction &entry) -> std::optional<int64_t> {
    const ActionProgram &program = program_.programs[rank][entry.program];
    if (program.kind == ActionKind::Step) {
      if (nextItem[rank] < program.items.size())
        return itemWaitsFor(rank, program.items[nextItem[rank]], 0);
      return std::nullopt;
    }
    for (int64_t t : waits_[rank][entry.program])
      if (!isSent(t, entry.microBatch))
        return t;
    return std::nullopt;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t rank = 0; rank < ranks_; ++rank) {
      const std::vector<ScheduledAction> &schedule = program_.schedule[rank];
      while (next[rank] < schedule.size()) {
        const ScheduledAction &entry = schedule[next[rank]];
        const ActionProgram &program = program_.programs[rank][entry.program];
        if (blockedBy(rank, entry))
          break;
        progress = true;
        if (program.kind == ActionKind::Step) {
          if (nextItem[rank] == program.items.size()) {
            ++next[rank];
            continue;
          }
          const StageItem &item = program.items[nextItem[rank]++];
          if (item.kind == StageItem::Kind::Send)
            sent[item.transfer][0] = true;
          continue;
        }
        for (int64_t t : sends_[rank][entry.program])
          sent[t][entry.microBatch] = true;
        ++next[rank];
      }
    }
  }
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    const std::vector<ScheduledAction> &schedule = program_.schedule[rank];
    if (next[rank] == schedule.size())
      continue;
    const ScheduledAction &entry = schedule[next[rank]];
    int64_t waited = *blockedBy(rank, entry);
    const ActionProgram &program = program_.programs[rank][entry.program];
    const StageTransfer &transfer = program_.transfers[waited];
    auto reader = llvm::find_if(program.items, [&](const StageItem &item) {
      return item.kind == StageItem::Kind::Op &&
             llvm::is_contained(item.op->getOperands(), transfer.received);
    });
    InFlightDiagnostic diag = reader != program.items.end()
                                  ? error(*reader)
                                  : anchor_->emitError();
    return diag << "deadlocks the pipeline: rank " << rank << " waits in "
                << program.actionName(entry.microBatch, program_.chunks)
                << " for a value from rank " << transfer.from
                << " that is never sent before it";
  }
  return success();
}

LogicalResult Checker::checkResults() {
  if (static_cast<int64_t>(program_.results.size()) != ranks_)
    return anchor_->emitError() << "expected the results of each of the "
                                << ranks_ << " pipeline ranks, found "
                                << program_.results.size();
  for (int64_t rank = 0; rank < ranks_; ++rank)
    for (auto [index, result] : program_.results[rank]) {
      if (llvm::isa<BlockArgument>(result))
        continue;
      auto it = sources_[rank].find(result);
      if (it == sources_[rank].end() ||
          !(it->second.total || isStep(rank, it->second.program)))
        return anchor_->emitError()
               << "result " << index << " never reaches pipeline rank " << rank
               << ", which holds it";
    }
  return success();
}

LogicalResult Checker::run() {
  if (static_cast<int64_t>(program_.schedule.size()) != ranks_)
    return anchor_->emitError() << "expected a schedule for each of the "
                             << ranks_ << " pipeline ranks, found "
                             << program_.schedule.size();
  if (failed(checkTransfers()) || failed(checkSchedules()))
    return failure();
  sources_.clear();
  sources_.resize(ranks_);
  waits_.assign(ranks_, {});
  sends_.assign(ranks_, {});
  for (int64_t rank = 0; rank < ranks_; ++rank)
    if (failed(checkDataflow(rank)))
      return failure();
  return failure(failed(simulate()) || failed(checkResults()));
}

} // namespace

LogicalResult verifyPipelineProgram(Operation *anchor,
                                    const PipelineProgram &program) {
  return Checker(anchor, program).run();
}

} // namespace trellis
