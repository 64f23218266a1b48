//===- trellis-opt.cpp - Runs trellis passes on MLIR text -----------------===//

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/Transforms/Passes.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"
#include "trellis/Pipeline/Passes.h"
#include "trellis/Sharding/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  trellis::registerAutodiffPasses();
  trellis::registerTrainingPipeline();
  trellis::graph::registerGraphPasses();
  trellis::registerShardingPasses();
  trellis::registerShardingPipeline();
  trellis::registerPipelinePasses();
  trellis::registerPipelinePhase();
  mlir::DialectRegistry registry;
  registry.insert<trellis::TrellisDialect, trellis::graph::GraphDialect,
                  mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::tensor::TensorDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Trellis optimizer driver\n", registry));
}
