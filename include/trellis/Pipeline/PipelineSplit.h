//===- PipelineSplit.h - A training step cut into pipeline stages -*- C++
//-*-===//
//
// Cuts a training step whose ops carry their micro-batch and phase
// (graph.micro_batch, graph.phase: the autodiff's tag-actions option) into
// one instruction stream per pipeline rank:
//
// - Every op of a micro-batch's forward or backward goes to the virtual
//   stage of its model part (graph.part: embedding on the first stage,
//   the layers as the split says, the head and loss on the last); ops
//   without a part (constants, resharding collectives) go with their users.
// - Ops of the whole step (loss average, gradient reductions, optimizer)
//   run on every rank that needs their results: a parameter's update where
//   the parameter is used, so that a parameter two stages share (a tied
//   embedding) is updated alike on both, from the same summed gradient.
// - A value made on one rank and read on another becomes a transfer: a
//   send after the action that made it, a receive at the schedule's receive
//   slot for the action that reads it (else just before it). Values keep
//   their layout: each rank sends its own piece. A value every rank of the
//   `pieceAxis` group holds whole is cut into pieces along that axis
//   (trellis.slice_shard) before it is sent, and gathered back
//   (trellis.all_gather) by the receivers.
// - Each rank runs its actions in the schedule's order, then the step's
//   ops in program order. The result is checked by simulation (sends never
//   block; an op waits for the transfers it reads) before it is returned:
//   every send is received and no rank waits forever.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PIPELINE_PIPELINESPLIT_H
#define TRELLIS_PIPELINE_PIPELINESPLIT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "trellis/Common/PipelineSchedule.h"
#include "trellis/Common/StageSplit.h"

#include <string>
#include <vector>

namespace trellis {

struct PipelineConfig {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  /// Ranks (pipeline stages), micro-batches, chunks per rank.
  PipelineShape shape;
  /// Layers per virtual stage (shape.virtualStages() entries).
  StageLayers layers;
  /// A mesh axis (tensor parallelism) whose ranks hold the same copy of a
  /// value that crosses stages: each then sends only its piece of it and
  /// the receiving ranks all-gather the pieces (Megatron's scatter-gather;
  /// the values' layouts come from trellis.layout). Empty: whole values.
  std::string pieceAxis;
};

/// A value sent from one rank of the pipeline to another. `channel` is
/// unique within the step.
struct StageTransfer {
  mlir::Value value;
  int64_t from = 0, to = 0;
  int64_t channel = 0;
  /// A later transfer back to `from` that `to` sends after it stopped to
  /// read this one: once `from` has received it, this send has completed
  /// and its buffer can go (1F1B: a forward's activation is done with when
  /// its gradient comes back). -1: none; the send completes by the end of
  /// the step.
  int64_t completedBy = -1;
};

/// One entry of a rank's stream: an op, or one end of a transfer.
struct StageItem {
  enum class Kind { Op, Send, Recv };
  Kind kind = Kind::Op;
  mlir::Operation *op = nullptr;
  /// Index into PipelineProgram::transfers (Send and Recv).
  int64_t transfer = -1;
};

/// The items of a stream that one schedule action (`F3`, `B3.c1`) or the
/// step's closing ops (`step`) expanded into: [first, first + count).
struct ActionSpan {
  std::string name;
  size_t first = 0, count = 0;
};

struct PipelineProgram {
  /// One stream per pipeline rank.
  std::vector<std::vector<StageItem>> streams;
  /// Per rank, its actions' spans in stream order.
  std::vector<std::vector<ActionSpan>> actions;
  std::vector<StageTransfer> transfers;
  /// Per argument and per result of the step: the ranks that hold it.
  std::vector<std::vector<int64_t>> argumentRanks;
  std::vector<std::vector<int64_t>> resultRanks;
};

/// Proves `program` (a split of `step`) runnable: all streams together,
/// each rank in order, sends never blocking, an op waiting for the
/// transfers it reads, reach their ends; every transfer is sent and
/// received once; every value is made or received on a rank before it is
/// read there; every result ends on the ranks that hold it. Fails with a
/// diagnostic naming the op and the ranks.
mlir::LogicalResult verifyPipelineProgram(mlir::func::FuncOp step,
                                          const PipelineProgram &program);

/// Splits `step` for `config`. Fails with a diagnostic when an op has no
/// action tags or no stage, when the schedule cannot be built, or when the
/// streams would deadlock.
mlir::FailureOr<PipelineProgram> splitPipeline(mlir::func::FuncOp step,
                                               const PipelineConfig &config);

} // namespace trellis

#endif // TRELLIS_PIPELINE_PIPELINESPLIT_H
