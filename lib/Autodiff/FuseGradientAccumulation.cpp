//===- FuseGradientAccumulation.cpp - Products written as f32 gradients ---===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_FUSEGRADIENTACCUMULATIONPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

bool isF32(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getElementType().isF32();
}

/// A matmul of the micro-batch read by one op alone.
bool isProductOfMicroBatch(MatmulOp matmul) {
  return matmul && matmul->hasOneUse() &&
         matmul->hasAttr(GraphDialect::kPhaseAttrName);
}

struct FuseGradientAccumulationPass
    : public trellis::impl::FuseGradientAccumulationPassBase<
          FuseGradientAccumulationPass> {
  using FuseGradientAccumulationPassBase::FuseGradientAccumulationPassBase;

  void runOnOperation() override {
    auto function = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      getOperation().emitError() << "expected a function of gradients @"
                                 << functionName << ", found none";
      return signalPassFailure();
    }
    Block &body = function.getBody().front();
    // A 16-bit product cast to f32 where it leaves the micro-batch (for
    // its sum over micro-batches, the step's ops or the results): the
    // product written in f32.
    for (CastOp cast : llvm::make_early_inc_range(body.getOps<CastOp>())) {
      auto matmul = cast.getInput().getDefiningOp<MatmulOp>();
      if (!isF32(cast.getResult()) || !cast->hasOneUse() ||
          cast->hasAttr(GraphDialect::kReduceFirstAttrName) ||
          !isProductOfMicroBatch(matmul) || matmul.getF32Result())
        continue;
      Operation *user = *cast->getUsers().begin();
      if (user->hasAttr(GraphDialect::kPhaseAttrName))
        continue;
      OpBuilder builder(matmul);
      auto wide = MatmulOp::create(builder, matmul.getLoc(), matmul.getLhs(),
                                   matmul.getRhs(), matmul.getTransposeLhs(),
                                   matmul.getTransposeRhs(),
                                   /*f32_result=*/true);
      copyPlacement(matmul, wide);
      cast.getResult().replaceAllUsesWith(wide.getResult());
      cast.erase();
      matmul.erase();
    }
    if (!intoTotals)
      return;
    // An f32 product summed over the micro-batches: added into the total
    // as it is made.
    for (MicrobatchSumOp sum :
         llvm::make_early_inc_range(body.getOps<MicrobatchSumOp>())) {
      auto matmul = sum.getInput().getDefiningOp<MatmulOp>();
      if (!isF32(sum.getResult()) || !isProductOfMicroBatch(matmul))
        continue;
      OpBuilder builder(matmul);
      auto fused = MatmulAccumulateOp::create(
          builder, matmul.getLoc(), matmul.getLhs(), matmul.getRhs(),
          matmul.getTransposeLhs(), matmul.getTransposeRhs());
      copyPlacement(matmul, fused);
      sum.getResult().replaceAllUsesWith(fused.getResult());
      sum.erase();
      matmul.erase();
    }
  }
};

} // namespace
