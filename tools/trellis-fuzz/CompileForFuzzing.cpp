//===- CompileForFuzzing.cpp - The compiler's path, for fuzz targets ------===//

#include "CompileForFuzzing.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/Transforms/Passes.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"
#include "trellis/Sharding/Passes.h"
#include "trellis/Target/Plan/PlanEmitter.h"

namespace trellis::fuzz {

void prepareContext(mlir::MLIRContext &context) {
  context.loadDialect<graph::GraphDialect, TrellisDialect,
                      mlir::func::FuncDialect>();
  context.printOpOnDiagnostic(false);
  context.getDiagEngine().registerHandler(
      [](mlir::Diagnostic &) { return mlir::success(); });
}

void compileForFuzzing(mlir::ModuleOp module, uint8_t options) {
  if (mlir::failed(mlir::verify(module)))
    return;
  bool hasStep = static_cast<bool>(
      module.lookupSymbol<mlir::func::FuncOp>("train_step"));
  mlir::PassManager pm(module.getContext());
  pm.enableVerifier(true);
  if (!hasStep) {
    if (!module.lookupSymbol<mlir::func::FuncOp>("forward"))
      return;
    TrainingOptions training;
    if (options & 0x40)
      training.precision = LowPrecision::BF16;
    buildTrainingPipeline(pm, training);
  }
  ShardingOptions sharding;
  sharding.dataParallel = options & 1 ? 2 : 1;
  sharding.tensorParallel = options & 2 ? 2 : 1;
  sharding.zeroStage = sharding.dataParallel > 1 ? (options >> 2) & 3 : 0;
  sharding.sequenceParallel = sharding.tensorParallel > 1 && (options & 0x10);
  sharding.contextParallel = options & 0x20 ? 2 : 1;
  sharding.contextKind = options & 0x80 ? "ring" : "ulysses";
  if (sharding.dataParallel * sharding.tensorParallel *
          sharding.contextParallel >
      1)
    buildShardingPipeline(pm, sharding);
  pm.addPass(graph::createFuseElementwisePass());
  if (mlir::failed(pm.run(module)))
    return;
  if (auto step = module.lookupSymbol<mlir::func::FuncOp>("train_step"))
    (void)emitPlan(step, PlanMetadata());
}

} // namespace trellis::fuzz
