//===- ExpertBiasUpdate.cpp - DeepSeek's auxiliary-loss-free balancing ----===//
//
// Adds to a training step the update of each router's score bias (a
// moe_route whose bias is a state argument: DeepSeek-V3's
// e_score_correction_bias): graph.expert_bias_update from the step's
// slots per expert, returned as the state's new value (graph.updates).
//
//===----------------------------------------------------------------------===//

#include "trellis/Autodiff/Passes.h"

#include "StepResults.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_EXPERTBIASUPDATEPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

struct ExpertBiasUpdatePass
    : public trellis::impl::ExpertBiasUpdatePassBase<ExpertBiasUpdatePass> {
  using ExpertBiasUpdatePassBase::ExpertBiasUpdatePassBase;

  void runOnOperation() override {
    auto step = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!step || step.isExternal()) {
      getOperation().emitError()
          << "expected a training step @" << functionName
          << " to update its routers' biases in, found none";
      return signalPassFailure();
    }
    if (!(rate > 0)) {
      step.emitError() << "expected a bias update rate > 0, found " << rate;
      return signalPassFailure();
    }
    // The routes whose bias is a state of the step.
    SmallVector<std::pair<MoeRouteOp, BlockArgument>> biased;
    step.walk([&](MoeRouteOp route) {
      auto bias = llvm::dyn_cast_or_null<BlockArgument>(route.getBias());
      auto role = bias ? step.getArgAttrOfType<StringAttr>(
                             bias.getArgNumber(), GraphDialect::kRoleAttrName)
                       : StringAttr();
      if (role && role.getValue() == "state")
        biased.emplace_back(route, bias);
    });
    if (biased.empty()) {
      step.emitError() << "the expert bias update moves routers' score "
                          "biases: expected a graph.moe_route whose bias is "
                          "a state argument (DeepSeek-V3's "
                          "e_score_correction_bias), found none";
      return signalPassFailure();
    }
    OpBuilder builder(&getContext());
    builder.setInsertionPoint(step.getBody().front().getTerminator());
    for (auto [route, bias] : biased) {
      int64_t experts =
          llvm::cast<RankedTensorType>(bias.getType()).getDimSize(0);
      Value counts = stepExpertCounts(builder, route, experts);
      auto update = ExpertBiasUpdateOp::create(
          builder, route.getLoc(), bias, counts, builder.getF64FloatAttr(rate));
      setModelPart(update, getModelPart(route));
      appendStepResult(step, update,
                       builder.getDictionaryAttr(builder.getNamedAttr(
                           GraphDialect::kUpdatesAttrName,
                           builder.getI64IntegerAttr(bias.getArgNumber()))));
    }
  }
};

} // namespace
