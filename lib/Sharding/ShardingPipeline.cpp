//===- ShardingPipeline.cpp - The sharding phase as one pipeline ----------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/Pass/PassManager.h"

using namespace mlir;

void trellis::buildShardingPipeline(OpPassManager &pm, StringRef function,
                                    int64_t dataParallel,
                                    int64_t tensorParallel, int64_t bucketBytes,
                                    bool explain) {
  ApplyPresetPassOptions preset;
  preset.functionName = function.str();
  preset.dataParallel = dataParallel;
  preset.tensorParallel = tensorParallel;
  pm.addPass(createApplyPresetPass(preset));
  PropagateShardingsPassOptions propagation;
  propagation.explain = explain;
  pm.addNestedPass<func::FuncOp>(createPropagateShardingsPass(propagation));
  pm.addNestedPass<func::FuncOp>(createPartitionPass());
  BucketAllReducesPassOptions buckets;
  buckets.bucketBytes = bucketBytes;
  pm.addNestedPass<func::FuncOp>(createBucketAllReducesPass(buckets));
}
