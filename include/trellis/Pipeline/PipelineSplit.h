//===- PipelineSplit.h - A training step cut into pipeline stages -*- C++
//-*-===//
//
// Cuts a training step of micro-batches (graph.micro_batches; the ops of
// one micro-batch marked with their graph.phase, written once) into, per
// pipeline rank, one program per action kind of each chunk plus the
// schedule that runs them per micro-batch:
//
// - Every op of the micro-batch runs on the virtual stage trellis-assign-
//   stages gave it (trellis.stage; by model part: embedding on the first
//   stage, the layers as the split says, the head and loss on the last).
//   Its phase names the action: forward, backward, or weight (the
//   weight-gradient half of a split backward; inside the backward unless
//   the schedule splits it). graph.microbatch_sum runs in the action that
//   makes its operand: it adds each micro-batch's value to a total of the
//   step.
// - Ops of the whole step run on every rank that needs their results, in
//   the rank's step program (after every micro-batch): a parameter's update
//   where the parameter is used, so that a parameter two stages share (a
//   tied embedding) is updated alike on both, from the same summed
//   gradient.
// - A value made on one rank and read on another becomes a transfer. One of
//   a micro-batch is sent at the end of the action that made it and
//   received by a receive program that the schedule posts at its receive
//   slot (else just before the action that reads it); each micro-batch's
//   copy travels on its own channel. One of the step is sent and received
//   inside the step programs. Values keep their layout: each rank sends its
//   own piece; a value every rank of the `pieceAxis` group holds whole is
//   cut into pieces along that axis (trellis.slice_shard) before it is
//   sent, and gathered back (trellis.all_gather) by the receivers.
// - Programs are written once over micro-batch-relative values; neither
//   their size nor the time to build them grows with the micro-batches.
//   The schedule (the ordered actions of each rank) does.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PIPELINE_PIPELINESPLIT_H
#define TRELLIS_PIPELINE_PIPELINESPLIT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "trellis/Analysis/StageSplit.h"
#include "trellis/Common/ActionNames.h"
#include "trellis/Common/PipelineSchedule.h"

#include <string>
#include <vector>

namespace trellis {

/// What the split reads besides the step: everything else (ranks, chunks,
/// schedule, each op's virtual stage) is in the IR, written by
/// trellis-assign-stages; a step without those attributes is one stage.
struct PipelineConfig {
  /// A mesh axis (tensor parallelism) whose ranks hold the same copy of a
  /// value that crosses stages: each then sends only its piece of it and
  /// the receiving ranks all-gather the pieces (Megatron's scatter-gather;
  /// the values' layouts come from trellis.layout). Empty: whole values.
  std::string pieceAxis;
};

/// A value sent from one rank of the pipeline to another. `channel` is
/// unique within the step; a transfer of a micro-batch's value happens once
/// per micro-batch (the runtime gives each its own channel).
struct StageTransfer {
  /// The value `from` sends, and the value `to` reads it as (the same value
  /// in a split of one function; a trellis.recv's result in stage
  /// functions).
  mlir::Value value, received;
  int64_t from = 0, to = 0;
  int64_t channel = 0;
  /// Made by an action of a micro-batch (else by the step).
  bool perMicroBatch = false;
  /// The programs that send it (on `from`), receive it and first read it
  /// (on `to`).
  int64_t sendProgram = -1, recvProgram = -1, readProgram = -1;
};

/// One entry of a program: an op, or one end of a transfer.
struct StageItem {
  enum class Kind { Op, Send, Recv };
  Kind kind = Kind::Op;
  mlir::Operation *op = nullptr;
  /// Index into PipelineProgram::transfers (Send and Recv).
  int64_t transfer = -1;
};

/// The program of one action kind of one chunk of a rank, written once and
/// run per micro-batch (the step's: once, after them); or, with `receives`,
/// the receives posted for that action of a micro-batch before it runs.
struct ActionProgram : ActionProgramName {
  std::vector<StageItem> items;

  /// `forward.c0`, `backward_receive.c1`, `step`.
  std::string name() const { return programName(*this); }
  /// The schedule's name of this program run for `microBatch`: `F3`,
  /// `B3.c1`, `W3`, `RF3` (receives for F3), `step`.
  std::string actionName(int64_t microBatch, int64_t chunks) const {
    return trellis::actionName(*this, microBatch, chunks > 1);
  }
};

/// Where an action of `virtualStage` comes among one micro-batch's actions
/// on its rank (of a pipeline of `virtualStages`): forwards in stage order,
/// then each stage's backward and weight gradients from the last stage
/// back; the step (any stage) after all of them. Every value a micro-batch's
/// action reads on its rank is made by an action earlier in this order.
int64_t orderInMicroBatch(ActionKind kind, int64_t virtualStage,
                          int64_t virtualStages);

/// One entry of a rank's schedule: a program, run for a micro-batch (-1
/// for the step program).
struct ScheduledAction {
  int64_t program = 0;
  int64_t microBatch = -1;
};

struct PipelineProgram {
  /// The ordering rule of the schedules, and the pipeline's shape.
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int64_t microBatches = 1;
  int64_t chunks = 1;
  /// Per rank: its programs, and the order it runs them in.
  std::vector<std::vector<ActionProgram>> programs;
  std::vector<std::vector<ScheduledAction>> schedule;
  std::vector<StageTransfer> transfers;
  /// Per argument and per result of the step: the ranks that hold it.
  std::vector<std::vector<int64_t>> argumentRanks;
  std::vector<std::vector<int64_t>> resultRanks;
  /// Per rank: the results it holds (index in the step) and the value it
  /// returns for each.
  std::vector<std::vector<std::pair<unsigned, mlir::Value>>> results;

  int64_t ranks() const { return static_cast<int64_t>(programs.size()); }
  /// The index of `rank`'s program of `kind`, `chunk`, `receives`, or -1.
  int64_t findProgram(int64_t rank, ActionKind kind, int64_t chunk,
                      bool receives) const;
};

/// Orders each rank's programs by `program.kind`'s rule (every program of
/// the micro-batch once per micro-batch, receive programs at the rule's
/// receive slots or just before their action, the step program last).
/// Fails with a diagnostic at an op of a
/// program the rule does not run once per micro-batch, or at `anchor` when
/// the rule cannot run the shape.
mlir::LogicalResult schedulePipeline(mlir::Operation *anchor,
                                     PipelineProgram &program);

/// Proves `program` runnable: every transfer is sent
/// and received once, in programs of its kind (a micro-batch's or the
/// step's); every program reads only values made before it on its rank in
/// the same micro-batch (by itself or an earlier action), received there,
/// or held there (arguments, totals of the step); all schedules together,
/// each rank in order, sends never blocking, an action waiting for the
/// transfers it reads, reach their ends; every result ends on the ranks
/// that hold it. The work is linear in the programs plus the schedules.
/// Fails with a diagnostic naming the op and the ranks.
mlir::LogicalResult verifyPipelineProgram(mlir::Operation *anchor,
                                          const PipelineProgram &program);

/// The stage functions trellis-split-stages made of `@stepName`, in stage
/// order. Fails with a diagnostic when there are none or a stage lacks its
/// function.
mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>>
findStageFunctions(mlir::ModuleOp module, llvm::StringRef stepName);

/// The step results stage function `stage` returns: for each of its
/// results, the step's index (trellis.result) and the value. Fails with a
/// diagnostic at a result that names none.
mlir::FailureOr<llvm::SmallVector<std::pair<unsigned, mlir::Value>>>
stageResults(mlir::func::FuncOp stage);

/// The programs, transfers and schedules of the stage functions that
/// trellis-split-stages made of `@stepName` (ops grouped by
/// trellis.program; transfers matched by channel). Fails with a diagnostic
/// when they are incomplete or inconsistent.
mlir::FailureOr<PipelineProgram> readStagePrograms(mlir::ModuleOp module,
                                                   llvm::StringRef stepName);

/// Splits `step` (a step of micro-batches, graph.micro_batches; cut by
/// trellis-assign-stages when it has several stages) for `config`. Fails
/// with a diagnostic when an op of the micro-batch has no stage, when a
/// value of a micro-batch reaches the step other than through
/// graph.microbatch_sum. The programs have no schedule yet
/// (schedulePipeline).
mlir::FailureOr<PipelineProgram> splitPipeline(mlir::func::FuncOp step,
                                               const PipelineConfig &config);

} // namespace trellis

#endif // TRELLIS_PIPELINE_PIPELINESPLIT_H
