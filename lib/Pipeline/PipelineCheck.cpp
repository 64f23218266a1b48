//===- PipelineCheck.cpp - Pipeline streams proven complete ---------------===//
//
// Runs every rank's stream of a split step together: each rank in order, a
// send never blocks, an op waits for the transfers it reads. Succeeds when
// every rank reaches its end, every transfer is sent and received once,
// every value is made or received on a rank before it is read there, and
// every result ends on the ranks that hold it.
//
//===----------------------------------------------------------------------===//

#include "trellis/Pipeline/PipelineSplit.h"

#include "llvm/ADT/DenseSet.h"

#include <map>

using namespace mlir;

namespace trellis {

LogicalResult verifyPipelineProgram(func::FuncOp step,
                                    const PipelineProgram &program) {
  int64_t ranks = static_cast<int64_t>(program.streams.size());
  // Each rank runs its stream in order; a send never blocks; an op waits
  // until every transfer it reads on this rank was sent.
  size_t count = program.transfers.size();
  std::vector<int> sends(count, 0), receives(count, 0);
  for (const std::vector<StageItem> &stream : program.streams)
    for (const StageItem &item : stream) {
      if (item.kind == StageItem::Kind::Send)
        ++sends[item.transfer];
      if (item.kind == StageItem::Kind::Recv)
        ++receives[item.transfer];
    }
  for (size_t t = 0; t < count; ++t)
    if (sends[t] != 1 || receives[t] != 1)
      return step.emitError() << "pipeline transfer " << t << " (rank "
                              << program.transfers[t].from << " to rank "
                              << program.transfers[t].to << ") is sent "
                              << sends[t] << " times and received "
                              << receives[t] << " times: expected once each";
  std::map<std::pair<int64_t, void *>, int64_t> incoming; // (rank, value)
  for (auto [index, transfer] : llvm::enumerate(program.transfers))
    incoming[{transfer.to, transfer.value.getAsOpaquePointer()}] = index;
  std::vector<bool> sent(count, false);
  std::vector<size_t> next(ranks, 0);
  // Values each rank has made or posted a receive for.
  std::vector<llvm::DenseSet<Value>> available(ranks);
  // The first operand `item` reads that this rank lacks, and whether only
  // its send is missing (the op waits) or it was never received or made
  // before (a broken stream).
  struct Missing {
    Value value;
    bool waiting = false;
  };
  auto missingFor = [&](int64_t rank,
                        const StageItem &item) -> std::optional<Missing> {
    if (item.kind == StageItem::Kind::Recv)
      return std::nullopt;
    SmallVector<Value> reads;
    if (item.kind == StageItem::Kind::Send)
      reads.push_back(program.transfers[item.transfer].value);
    else
      reads.append(item.op->operand_begin(), item.op->operand_end());
    for (Value value : reads) {
      if (llvm::isa<BlockArgument>(value))
        continue;
      if (!available[rank].contains(value))
        return Missing{value, false};
      auto it = incoming.find({rank, value.getAsOpaquePointer()});
      if (it != incoming.end() && !sent[it->second])
        return Missing{value, true};
    }
    return std::nullopt;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      const std::vector<StageItem> &stream = program.streams[rank];
      while (next[rank] < stream.size()) {
        const StageItem &item = stream[next[rank]];
        std::optional<Missing> missing = missingFor(rank, item);
        if (missing && missing->waiting)
          break;
        if (missing) {
          InFlightDiagnostic diag =
              item.op ? item.op->emitOpError() : step.emitError();
          diag << "reads a value on pipeline rank " << rank
               << " before it is made or received there";
          diag.attachNote(missing->value.getLoc()) << "the value";
          return failure();
        }
        if (item.kind == StageItem::Kind::Send)
          sent[item.transfer] = true;
        if (item.kind == StageItem::Kind::Recv)
          available[rank].insert(program.transfers[item.transfer].value);
        if (item.kind == StageItem::Kind::Op)
          available[rank].insert(item.op->result_begin(),
                                 item.op->result_end());
        ++next[rank];
        progress = true;
      }
    }
  }
  for (int64_t rank = 0; rank < ranks; ++rank) {
    const std::vector<StageItem> &stream = program.streams[rank];
    if (next[rank] == stream.size())
      continue;
    const StageItem &item = stream[next[rank]];
    const StageTransfer &waited = program.transfers[incoming[{
        rank, missingFor(rank, item)->value.getAsOpaquePointer()}]];
    InFlightDiagnostic diag =
        item.op ? item.op->emitOpError() : step.emitError();
    return diag << "deadlocks the pipeline: rank " << rank
                << " waits for a value from rank " << waited.from
                << " that is never sent before it";
  }
  // Every result ends on the ranks that hold it.
  Operation *terminator = step.getBody().front().getTerminator();
  for (auto [index, holders] : llvm::enumerate(program.resultRanks))
    for (int64_t rank : holders) {
      Value result = terminator->getOperand(index);
      if (!llvm::isa<BlockArgument>(result) &&
          !available[rank].contains(result))
        return step.emitError()
               << "result " << index << " never reaches pipeline rank " << rank
               << ", which holds it";
    }
  return success();
}

} // namespace trellis
