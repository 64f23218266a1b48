//===- ShardingPipeline.cpp - The sharding phase as one pipeline ----------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/Pass/PassManager.h"

using namespace mlir;

void trellis::buildShardingPipeline(OpPassManager &pm, int64_t dataParallel) {
  ApplyPresetPassOptions preset;
  preset.dataParallel = dataParallel;
  pm.addPass(createApplyPresetPass(preset));
  pm.addNestedPass<func::FuncOp>(createPropagateShardingsPass());
  pm.addNestedPass<func::FuncOp>(createPartitionPass());
}
