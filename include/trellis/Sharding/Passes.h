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
  int64_t dataParallel = 1;
  int64_t tensorParallel = 1;
  /// The ZeRO stage (0: none) over the data-parallel axis.
  int64_t zeroStage = 0;
  /// Megatron sequence parallelism over the tensor-parallel axis.
  bool sequenceParallel = false;
  /// Context parallelism over a "cp" axis of this size, and its kind
  /// (ulysses, allgather, ring).
  int64_t contextParallel = 1;
  std::string contextKind = "ulysses";
  /// Bytes per fused gradient reduction.
  int64_t bucketBytes = 25 << 20;
  /// Keep gradient buckets within one model part (the step is pipelined).
  bool bucketsPerPart = false;
  /// Report, op by op, where shardings came from (remarks).
  bool explain = false;
};

/// Adds preset, propagation, partitioning and gradient bucketing for a
/// `dataParallel` x `tensorParallel` mesh on `options.function`.
void buildShardingPipeline(mlir::OpPassManager &pm,
                           const ShardingOptions &options);

/// Registers `trellis-sharding-pipeline` (the phase with its options) with
/// trellis-opt.
void registerShardingPipeline();

} // namespace trellis

#endif // TRELLIS_SHARDING_PASSES_H
