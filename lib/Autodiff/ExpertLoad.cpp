//===- ExpertLoad.cpp - The tokens each expert receives, as a metric ------===//
//
// Adds to a training step a result with the metric "expert_load": per
// mixture-of-experts layer (each moe_route, in step order), how many slots
// chose each expert over the whole step (every micro-batch, every
// data-parallel rank), [layers, experts] f32. The runtime reports the
// load's balance (the largest max/mean over the layers) with each step.
//
//===----------------------------------------------------------------------===//

#include "trellis/Autodiff/Passes.h"

#include "StepResults.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_EXPERTLOADPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

struct ExpertLoadPass
    : public trellis::impl::ExpertLoadPassBase<ExpertLoadPass> {
  using ExpertLoadPassBase::ExpertLoadPassBase;

  void runOnOperation() override {
    auto step = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!step || step.isExternal()) {
      getOperation().emitError() << "expected a training step @" << functionName
                                 << " to count its experts' tokens, found none";
      return signalPassFailure();
    }
    SmallVector<MoeRouteOp> routes;
    step.walk([&](MoeRouteOp route) { routes.push_back(route); });
    if (routes.empty())
      return;
    int64_t experts = routeExperts(routes.front());
    for (MoeRouteOp route : routes)
      if (routeExperts(route) != experts) {
        route.emitOpError() << "routes over " << routeExperts(route)
                            << " experts, another layer over " << experts
                            << ": expected one expert count for the "
                               "expert_load metric";
        return signalPassFailure();
      }
    OpBuilder builder(&getContext());
    builder.setInsertionPoint(step.getBody().front().getTerminator());
    SmallVector<Value> rows;
    for (MoeRouteOp route : routes) {
      Value counts = stepExpertCounts(builder, route, experts);
      auto row = ReshapeOp::create(builder, route.getLoc(), counts,
                                   ArrayRef<int64_t>{1, experts});
      setModelPart(row, getModelPart(route));
      rows.push_back(row);
    }
    Value load =
        rows.size() == 1
            ? rows.front()
            : ConcatOp::create(builder, step.getLoc(), rows, 0).getResult();
    // Reported as the worst layer's busiest expert over its mean.
    appendMetricResult(
        step, load, "expert_load",
        MetricReport{"expert load max/mean", MetricSummary::MaxOverMean});
  }

private:
  static int64_t routeExperts(MoeRouteOp route) {
    return llvm::cast<RankedTensorType>(route.getLogits().getType())
        .getShape()
        .back();
  }
};

} // namespace
