//===- AccumulateMicroBatches.cpp - One micro-batch's gradients, m per step ===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_ACCUMULATEMICROBATCHESPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

struct AccumulateMicroBatchesPass
    : public trellis::impl::AccumulateMicroBatchesPassBase<
          AccumulateMicroBatchesPass> {
  using AccumulateMicroBatchesPassBase::AccumulateMicroBatchesPassBase;

  void runOnOperation() override {
    auto function = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      getOperation().emitError() << "expected a function @" << functionName
                                 << " of one micro-batch, found none";
      return signalPassFailure();
    }
    if (microBatches < 1) {
      function.emitError() << "expected micro-batches >= 1, found "
                           << static_cast<int64_t>(microBatches);
      return signalPassFailure();
    }
    Block &body = function.getBody().front();
    Operation *terminator = body.getTerminator();
    OpBuilder builder(&getContext());
    function->setAttr(GraphDialect::kMicroBatchesAttrName,
                      builder.getI64IntegerAttr(microBatches));
    // Each value of the micro-batch that an op of the step or a result
    // reads: summed over the micro-batches right before its first such
    // reader.
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (!op.hasAttr(GraphDialect::kPhaseAttrName))
        continue;
      for (Value result : op.getResults()) {
        SmallVector<OpOperand *> stepUses;
        for (OpOperand &use : result.getUses())
          if (!use.getOwner()->hasAttr(GraphDialect::kPhaseAttrName))
            stepUses.push_back(&use);
        if (stepUses.empty())
          continue;
        Operation *firstReader = stepUses.front()->getOwner();
        for (OpOperand *use : stepUses)
          if (use->getOwner()->isBeforeInBlock(firstReader))
            firstReader = use->getOwner();
        builder.setInsertionPoint(firstReader);
        auto total = MicrobatchSumOp::create(builder, op.getLoc(), result);
        setModelPart(total, getModelPart(&op));
        for (OpOperand *use : stepUses)
          use->set(total);
      }
    }
    // The loss is the mean of the micro-batches' losses (a linear scale:
    // a data-parallel loss is reduced after it, alone).
    if (microBatches > 1 && terminator->getNumOperands() > 0) {
      builder.setInsertionPoint(terminator);
      terminator->setOperand(
          0, ScaleOp::create(builder, function.getLoc(),
                             terminator->getOperand(0),
                             builder.getF64FloatAttr(1.0 / microBatches)));
    }
  }
};

} // namespace
