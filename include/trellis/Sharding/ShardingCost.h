//===- ShardingCost.h - A sharding's cost, before partitioning -*- C++ -*-===//
//
// The cost query of the planner: given a step whose values carry shardings
// (annotated and propagated, not partitioned), what each rank computes,
// holds and sends in one step, in the partitioned step's terms. It follows
// the partitioner's own decisions (Resharding.h: each op's layout, each
// reshard's collectives) without building IR, and prices each op's piece
// by its op table row over the piece's factor sizes. The partitioned
// step's report (StepReport.h) gives the same FLOPs and collective bytes;
// counts of gradient reductions differ where bucketing fuses them.
//
// Pipelines are priced per rank, with the transfers between ranks, once
// -trellis-assign-stages has cut the step, and ring attention as its ring.
// Not priced yet: the activation memory (the arena).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_SHARDING_SHARDINGCOST_H
#define TRELLIS_SHARDING_SHARDINGCOST_H

#include "trellis/Analysis/StepReport.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <string>
#include <vector>

namespace trellis {

/// Ops of one rank that a time model prices alike: one kind of op run in
/// one action (a phase of one model chunk) or in the step, summed over the
/// step's ops of that kind.
struct PricedWork {
  /// The action they run in, once per micro-batch; `Step`: once per step,
  /// after every micro-batch's actions. Accumulating a micro-batch's
  /// gradient runs in its backward.
  enum class Phase { Forward, Backward, Weight, Step };
  Phase phase = Phase::Step;
  /// The model chunk on its rank (virtual stage / ranks).
  int64_t chunk = 0;
  /// The op-table row (`matmul`, `attention`), or a collective's key as in
  /// `communication` (`all_reduce over dp`, `send over pp`).
  std::string name;
  /// The element type the ops compute in (their first operand's: `f32`,
  /// `bf16`, `f16`); empty for collectives and transfers.
  std::string dtype;
  /// A matmul's piece (rows with a shared weight's batch folded in,
  /// columns, depth); an attention's query length, key length and head
  /// dimension; 0 for other ops.
  int64_t gemmRows = 0, gemmColumns = 0, gemmDepth = 0;
  /// An attention over causally masked keys (its kernel skips half).
  bool causal = false;
  /// Collectives that -trellis-schedule-collectives issues with a
  /// compute-bound op of their action before their first reader (the
  /// time model hides them behind the action's compute); false for the
  /// rest and for compute.
  bool hidden = false;
  /// Executions in one action (or in the step) and their summed cost and
  /// traffic.
  int64_t calls = 0;
  double flops = 0;
  int64_t bytesRead = 0, bytesWritten = 0;
  StepReport::Traffic traffic;
};

struct ShardedStepCost {
  /// FLOPs of one rank's graph ops in one step (each micro-batch's), as
  /// StepReport::flops counts them.
  double flops = 0;
  /// Bytes those ops read and write (before fusion).
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
  /// The parameter pieces and optimizer states (moments, fp32 masters)
  /// one rank holds, as StepReport counts them.
  int64_t parameterBytes = 0;
  int64_t optimizerStateBytes = 0;
  /// The collectives the partitioner inserts, keyed and counted as
  /// StepReport::communication (before gradient bucketing).
  TrafficByCollective communication;
  /// The same step as a time model reads it: every op and transfer of the
  /// rank, grouped by action and kind (PricedWork).
  std::vector<PricedWork> work;
  /// Gradients a micro-batch hands to the step (values the actions make
  /// and step ops read), in bytes, as StepReport's `grads` before any
  /// micro-batch accumulation is freed.
  int64_t gradientBytes = 0;
  /// Per model chunk on the rank: bytes of one micro-batch's forward values
  /// that its backward reads (what a micro-batch keeps alive between its
  /// forward and its backward).
  std::vector<int64_t> savedActivationBytes;
  /// Per model chunk on the rank: bytes of one micro-batch's backward values
  /// that its weight-gradient ops read (output gradients, and under
  /// recomputation the recomputed activations): what a split backward
  /// (ZB-H1) keeps until its weight gradients run.
  std::vector<int64_t> weightGradientInputBytes;

  /// `{"flops", "bytes": {...}, "comm_bytes": {...}, "communication":
  /// {key: {"calls", "bytes", "wire_bytes"}}}` (docs/Report.md).
  llvm::json::Object toJson() const;
};

/// What the passes after partitioning will do to the step.
struct CostQueryOptions {
  /// The pipeline the step was cut for (-trellis-assign-stages marked its
  /// ops with stages): the mesh axis its transfers go over, and the axis
  /// values are sent in pieces over ("": whole; the tensor axis when there
  /// is one).
  std::string pipelineAxis = "pp";
  std::string pieceAxis;
  /// Attention over a sequence split by context parallelism runs as a ring
  /// (-trellis-lower-ring-attention), not in the all-gather form.
  bool ringAttention = false;
  /// The schedule runs the weight gradients as actions of their own
  /// (zb-h1): a backward collective is not hidden by them.
  bool splitWeightGradients = false;
  /// -trellis-schedule-collectives runs after partitioning; without it
  /// no collective is hidden by the compute after it.
  bool scheduleCollectives = true;
};

/// Each pipeline rank's share of `step` (a function with a body) whose ops
/// carry propagated shardings (-trellis-propagate-shardings): one entry per
/// rank of the pipeline the step was cut for (trellis.pipeline_stages),
/// else one. A function without sharded arguments runs whole on each rank.
/// Fails with a diagnostic on an op with no sharding rule or no propagated
/// sharding.
mlir::FailureOr<std::vector<ShardedStepCost>>
estimateShardedStep(mlir::func::FuncOp step,
                    const CostQueryOptions &options = {});

} // namespace trellis

#endif // TRELLIS_SHARDING_SHARDINGCOST_H
