//===- StepTime.h - A plan's step time on a cluster -------------*- C++ -*-===//
//
// The planner's time model. It reads each pipeline rank's work as the cost
// query prices it (ShardedStepCost::work: every op and collective, grouped
// by the action it runs in) and a cluster description, and predicts one
// training step:
//  - an op's time from its FLOPs and bytes: matmuls at the device's GEMM
//    efficiency for their sizes, attention at its efficiency, everything
//    else at the memory bandwidth, plus a launch overhead each;
//  - a collective's by an alpha-beta model of NCCL's ring (a tree's
//    latency for all-reduces across nodes) over the link tier its group
//    spans: inside a node when the group's ranks share one (mesh order
//    decides: minor axes are adjacent ranks), else each device's network
//    share times the group's devices per node, capped by the node's links;
//  - what overlaps: a collective inside an action hides behind the
//    action's compute when -trellis-schedule-collectives issues it with a
//    compute-bound op before its first reader (PricedWork::hidden: under
//    sequence parallelism, the backward's gathers and reduce-scatters),
//    and so do data-parallel ones (ZeRO-3's gathers, ZeRO-2's
//    per-micro-batch reductions) and ring attention's permutes; the
//    other tensor- and context-parallel ones are exposed; the step's gradient
//    reductions hide behind the last backward when the step has one micro-batch
//    (the reductions start as their buckets fill), and run after the actions
//    otherwise;
//  - the pipeline by the schedule simulator with these action durations
//    and transfer times, then each rank's step (reductions, optimizer,
//    gathers) after its last action.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PLANNER_STEPTIME_H
#define TRELLIS_PLANNER_STEPTIME_H

#include "trellis/Common/Mesh.h"
#include "trellis/Common/PipelineSchedule.h"
#include "trellis/Planner/Cluster.h"
#include "trellis/Sharding/ShardingCost.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trellis::planner {

/// What the step is made of, for the time model.
struct StepLayout {
  /// The mesh, major to minor (axes of size 1 may be left out).
  std::vector<MeshAxis> axes;
  /// The pipeline (one rank and the step's micro-batches without one).
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  PipelineShape pipeline;
};

/// Where one rank's step time goes (seconds).
struct RankTime {
  /// Compute of every action (recomputation included) and of the step,
  /// and the same by op-table row.
  double compute = 0;
  std::map<std::string, double> computeByOp;
  /// Exposed communication by collective key (`all_reduce over tp`):
  /// what no compute hides. Pipeline transfers are the bubble's.
  std::map<std::string, double> exposed;
  /// Idle time between the rank's actions (pipeline bubble and waiting
  /// for transfers).
  double bubble = 0;
  /// The optimizer's share of `compute`.
  double optimizer = 0;
  /// When the rank's last action ends, and its step.
  double actionsEnd = 0, stepEnd = 0;
};

struct StepTime {
  /// The slowest rank's end.
  double seconds = 0;
  std::vector<RankTime> ranks;
  /// The simulated pipeline, for its timeline.
  PipelineSimulation simulation;

  /// `{"step_time_s", "compute_s", "compute_by_op_s": {op: s},
  /// "exposed_communication_s": {key: s}, "bubble_s", "optimizer_s"}` of
  /// the slowest rank.
  llvm::json::Object toJson() const;
};

/// Seconds one execution of `work` (its summed cost over `work.calls`
/// ops) takes on `cluster`'s device; 0 for collectives and transfers.
double computeSeconds(const PricedWork &work, const ClusterSpec &cluster);

/// Seconds `work`'s collective or transfer (all of its calls) takes over
/// the links of `layout`'s mesh; 0 for compute. Fails (nullopt, `error`)
/// on a key naming an axis the mesh does not have.
std::optional<double> communicationSeconds(const PricedWork &work,
                                           const StepLayout &layout,
                                           const ClusterSpec &cluster,
                                           std::string &error);

/// Predicts the step of `ranks` (one entry per pipeline rank, from
/// estimateShardedStep) laid out as `layout` on `cluster`. Fails with
/// `error` when the schedule cannot be built for the pipeline's shape.
std::optional<StepTime>
predictStepTime(const std::vector<ShardedStepCost> &ranks,
                const StepLayout &layout, const ClusterSpec &cluster,
                std::string &error);

} // namespace trellis::planner

#endif // TRELLIS_PLANNER_STEPTIME_H
