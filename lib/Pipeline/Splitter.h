//===- Splitter.h - Cutting a step into pipeline stages ---------*- C++ -*-===//
//
// The pipeline split's one class, its methods in three files: placement of
// ops on stages and actions (StagePlacement.cpp), the transfers between
// stages (StageTransfers.cpp), and the programs built from them
// (PipelineSplit.cpp). The schedules that order the programs are in
// SchedulePipeline.cpp, beside the pass that runs them.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_PIPELINE_SPLITTER_H
#define TRELLIS_LIB_PIPELINE_SPLITTER_H

#include "trellis/Analysis/RankPlacement.h"
#include "trellis/Pipeline/PipelineSplit.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <optional>
#include <set>

namespace trellis::pipeline {

using mlir::Block;
using mlir::FailureOr;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::Value;
namespace func = mlir::func;

using trellis::RankSet;

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

/// The shape and schedule `step` was cut for.
FailureOr<CutOfStep> readCut(func::FuncOp step);

class Splitter {
public:
  Splitter(func::FuncOp step, const PipelineConfig &config,
           const CutOfStep &cut)
      : step_(step), config_(config), cut_(cut), body_(step.getBody().front()),
        ranks_(cut.shape.ranks) {}

  FailureOr<PipelineProgram> run();

private:
  /// The action of each op of a micro-batch (checking its virtual stage).
  LogicalResult placeActionOps();
  /// The ranks of every op, result and argument (RankPlacement.h).
  void placeOnRanks();
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
  /// Hoists receives of the step so that each rank receives a peer's
  /// step values in the order the peer sends them (NCCL pairs a link's
  /// transfers in order): a receive reads nothing, so moving it earlier
  /// changes only how long its buffer lives.
  void receiveStepValuesInSendOrder();

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
  std::map<std::tuple<int64_t, ActionKind, int64_t, bool>, int64_t> programOf_;
};

} // namespace trellis::pipeline

#endif // TRELLIS_LIB_PIPELINE_SPLITTER_H
