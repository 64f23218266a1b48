//===- ShardingPipeline.cpp - The sharding phase as one pipeline ----------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void trellis::buildShardingPipeline(OpPassManager &pm,
                                    const ShardingOptions &options) {
  ApplyPresetPassOptions preset;
  preset.functionName = options.function;
  preset.dataParallel = options.dataParallel;
  preset.tensorParallel = options.tensorParallel;
  preset.contextParallel = options.contextParallel;
  pm.addPass(createApplyPresetPass(preset));
  if (options.contextParallel > 1) {
    ApplyContextParallelPassOptions context;
    context.functionName = options.function;
    context.kind = options.contextKind;
    pm.addPass(createApplyContextParallelPass(context));
  }
  if (options.sequenceParallel) {
    ApplySequenceParallelPassOptions sequence;
    sequence.functionName = options.function;
    pm.addPass(createApplySequenceParallelPass(sequence));
  }
  if (options.zeroStage > 0) {
    ApplyZeroPassOptions zero;
    zero.functionName = options.function;
    zero.stage = options.zeroStage;
    pm.addPass(createApplyZeroPass(zero));
  }
  PropagateShardingsPassOptions propagation;
  propagation.explain = options.explain;
  pm.addNestedPass<func::FuncOp>(createPropagateShardingsPass(propagation));
  pm.addNestedPass<func::FuncOp>(createPartitionPass());
  if (options.contextParallel > 1 && options.contextKind == "ring")
    pm.addNestedPass<func::FuncOp>(createLowerRingAttentionPass());
  BucketAllReducesPassOptions buckets;
  buckets.bucketBytes = options.bucketBytes;
  buckets.perPart = options.bucketsPerPart;
  pm.addNestedPass<func::FuncOp>(createBucketAllReducesPass(buckets));
}

namespace {

/// ShardingOptions as pipeline options of trellis-opt.
struct ShardingPipelineOptions
    : public PassPipelineOptions<ShardingPipelineOptions> {
  Option<std::string> function{*this, "function",
                               llvm::cl::desc("The function to shard"),
                               llvm::cl::init("train_step")};
  Option<int64_t> dataParallel{*this, "dp",
                               llvm::cl::desc("Data-parallel degree"),
                               llvm::cl::init(1)};
  Option<int64_t> tensorParallel{*this, "tp",
                                 llvm::cl::desc("Tensor-parallel degree"),
                                 llvm::cl::init(1)};
  Option<int64_t> zeroStage{*this, "zero",
                             llvm::cl::desc("ZeRO stage (0-3) over dp"),
                             llvm::cl::init(0)};
  Option<int64_t> contextParallel{
      *this, "cp", llvm::cl::desc("Context-parallel degree"),
      llvm::cl::init(1)};
  Option<std::string> contextKind{
      *this, "cp-kind",
      llvm::cl::desc("Context parallelism: ulysses, allgather or ring"),
      llvm::cl::init("ulysses")};
  Option<bool> sequenceParallel{
      *this, "sp",
      llvm::cl::desc("Megatron sequence parallelism over tp"),
      llvm::cl::init(false)};
  Option<int64_t> bucketBytes{*this, "bucket-bytes",
                              llvm::cl::desc("Bytes per gradient bucket"),
                              llvm::cl::init(25 << 20)};
  Option<bool> bucketsPerPart{
      *this, "buckets-per-part",
      llvm::cl::desc("Keep gradient buckets within one model part"),
      llvm::cl::init(false)};
  Option<bool> explain{*this, "explain",
                       llvm::cl::desc("Remark where shardings came from"),
                       llvm::cl::init(false)};
};

} // namespace

void trellis::registerShardingPipeline() {
  PassPipelineRegistration<ShardingPipelineOptions>(
      "trellis-sharding-pipeline",
      "The sharding phase: preset, propagation, partitioning, buckets",
      [](OpPassManager &pm, const ShardingPipelineOptions &options) {
        ShardingOptions sharding;
        sharding.function = options.function;
        sharding.dataParallel = options.dataParallel;
        sharding.tensorParallel = options.tensorParallel;
        sharding.zeroStage = options.zeroStage;
        sharding.sequenceParallel = options.sequenceParallel;
        sharding.contextParallel = options.contextParallel;
        sharding.contextKind = options.contextKind;
        sharding.bucketBytes = options.bucketBytes;
        sharding.bucketsPerPart = options.bucketsPerPart;
        sharding.explain = options.explain;
        buildShardingPipeline(pm, sharding);
      });
}
