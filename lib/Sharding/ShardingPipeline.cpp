//===- ShardingPipeline.cpp - The sharding phase as one pipeline ----------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "trellis/Common/Mesh.h"

using namespace mlir;

void trellis::buildShardingPipeline(OpPassManager &pm,
                                    const ShardingOptions &options) {
  ApplyPresetPassOptions preset;
  preset.functionName = options.function;
  preset.meshText = options.mesh;
  pm.addPass(createApplyPresetPass(preset));
  std::optional<Mesh> mesh = Mesh::parse(options.mesh, nullptr);
  if (mesh && mesh->roleSize(AxisRole::Expert) > 1) {
    ApplyExpertParallelPassOptions experts;
    experts.functionName = options.function;
    pm.addPass(createApplyExpertParallelPass(experts));
  }
  if (options.contextParallel) {
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
    zero.axes.assign(options.zeroAxes.begin(), options.zeroAxes.end());
    pm.addPass(createApplyZeroPass(zero));
  }
  PropagateShardingsPassOptions propagation;
  propagation.explain = options.explain;
  pm.addNestedPass<func::FuncOp>(createPropagateShardingsPass(propagation));
  if (!options.partition)
    return;
  pm.addNestedPass<func::FuncOp>(createPartitionPass());
  if (options.contextParallel && options.contextKind == "ring")
    pm.addNestedPass<func::FuncOp>(createLowerRingAttentionPass());
  if (options.expertDispatch == "all-to-all")
    pm.addNestedPass<func::FuncOp>(createLowerExpertAllToAllPass());
  BucketAllReducesPassOptions buckets;
  buckets.bucketBytes = options.bucketBytes;
  buckets.perPart = options.bucketsPerPart;
  pm.addNestedPass<func::FuncOp>(createBucketAllReducesPass(buckets));
  if (options.scheduleCollectives)
    pm.addNestedPass<func::FuncOp>(createScheduleCollectivesPass());
}

namespace {

/// ShardingOptions as pipeline options of trellis-opt.
struct ShardingPipelineOptions
    : public PassPipelineOptions<ShardingPipelineOptions> {
  Option<std::string> function{*this, "function",
                               llvm::cl::desc("The function to shard"),
                               llvm::cl::init("train_step")};
  Option<std::string> mesh{
      *this, "mesh",
      llvm::cl::desc("The step's mesh (dp=2,tp=2, rows:data=2), instead of "
                     "dp, tp and cp"),
      llvm::cl::init("")};
  Option<int64_t> dataParallel{*this, "dp",
                               llvm::cl::desc("Data-parallel degree"),
                               llvm::cl::init(1)};
  Option<int64_t> tensorParallel{*this, "tp",
                                 llvm::cl::desc("Tensor-parallel degree"),
                                 llvm::cl::init(1)};
  Option<int64_t> zeroStage{*this, "zero",
                             llvm::cl::desc("ZeRO stage (0-3) over dp"),
                             llvm::cl::init(0)};
  ListOption<std::string> zeroAxes{
      *this, "zero-axes",
      llvm::cl::desc("The axes ZeRO shards over (default: the data axes)")};
  Option<int64_t> contextParallel{
      *this, "cp", llvm::cl::desc("Context-parallel degree"),
      llvm::cl::init(1)};
  Option<std::string> contextKind{
      *this, "cp-kind",
      llvm::cl::desc("Context parallelism: ulysses, allgather or ring"),
      llvm::cl::init("ulysses")};
  Option<std::string> expertDispatch{
      *this, "ep-dispatch",
      llvm::cl::desc("Expert parallelism's dispatch: gather or all-to-all"),
      llvm::cl::init("gather")};
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
        // The degrees, major to minor as the presets order them, unless
        // the mesh is given.
        sharding.mesh = options.mesh;
        if (sharding.mesh.empty()) {
          sharding.mesh = "dp=" + std::to_string(options.dataParallel);
          if (options.contextParallel != 1)
            sharding.mesh += ",cp=" + std::to_string(options.contextParallel);
          sharding.mesh += ",tp=" + std::to_string(options.tensorParallel);
        }
        sharding.zeroStage = options.zeroStage;
        sharding.zeroAxes.assign(options.zeroAxes.begin(),
                                 options.zeroAxes.end());
        sharding.sequenceParallel = options.sequenceParallel;
        std::optional<Mesh> mesh = Mesh::parse(sharding.mesh, nullptr);
        sharding.contextParallel =
            mesh && mesh->roleSize(AxisRole::Context) > 1;
        sharding.contextKind = options.contextKind;
        sharding.expertDispatch = options.expertDispatch;
        sharding.bucketBytes = options.bucketBytes;
        sharding.bucketsPerPart = options.bucketsPerPart;
        sharding.explain = options.explain;
        buildShardingPipeline(pm, sharding);
      });
}
