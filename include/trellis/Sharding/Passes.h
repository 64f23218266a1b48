//===- Passes.h - Sharding passes -------------------------------*- C++ -*-===//

#ifndef TRELLIS_SHARDING_PASSES_H
#define TRELLIS_SHARDING_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

namespace trellis {

#define GEN_PASS_DECL
#include "trellis/Sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trellis/Sharding/Passes.h.inc"

/// The attribute propagation leaves on ops: one sharding per result.
constexpr llvm::StringLiteral kResultShardingsAttrName =
    TrellisDialect::kResultShardingsAttrName;

/// What the sharding phase does to a training step.
struct ShardingOptions {
  /// The function to shard.
  std::string function = "train_step";
  /// The step's mesh (`dp=2,tp=2`; trellis/Common/Mesh.h's text, roles
  /// included), without the pipeline's axis.
  std::string mesh;
  /// The ZeRO stage (0: none), over `zeroAxes` (empty: the mesh's data and
  /// expert axes).
  int64_t zeroStage = 0;
  std::vector<std::string> zeroAxes;
  /// Megatron sequence parallelism over the tensor axis.
  bool sequenceParallel = false;
  /// Context parallelism over the mesh's context axis, and its kind
  /// (ulysses, allgather, ring).
  bool contextParallel = false;
  std::string contextKind = "ulysses";
  /// How expert ops reach the experts under expert parallelism: "gather"
  /// (the partitioner's all-gather / reduce-scatter) or "all-to-all"
  /// (-trellis-lower-expert-all-to-all).
  std::string expertDispatch = "gather";
  /// Bytes per fused gradient reduction.
  int64_t bucketBytes = 25 << 20;
  /// Keep gradient buckets within one model part (the step is pipelined).
  bool bucketsPerPart = false;
  /// Report, op by op, where shardings came from (remarks).
  bool explain = false;
  /// Partition (and lower and bucket) after propagating; without it the
  /// phase ends with every value's sharding decided, for the cost query.
  bool partition = true;
  /// Issue each collective where compute hides it
  /// (-trellis-schedule-collectives), after partitioning.
  bool scheduleCollectives = true;
};

/// Adds preset, propagation, partitioning and gradient bucketing for
/// `options.mesh` on `options.function`.
void buildShardingPipeline(mlir::OpPassManager &pm,
                           const ShardingOptions &options);

/// Registers `trellis-sharding-pipeline` (the phase with its options) with
/// trellis-opt.
void registerShardingPipeline();

} // namespace trellis

#endif // TRELLIS_SHARDING_PASSES_H
