//===- GuardUpdates.cpp - Updates apply only when the gradients are finite
//-===//

#include "trellis/Autodiff/Passes.h"

#include "StepResults.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_GUARDUPDATESPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

struct GuardUpdatesPass
    : public trellis::impl::GuardUpdatesPassBase<GuardUpdatesPass> {
  using GuardUpdatesPassBase::GuardUpdatesPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>(functionName);
    if (!step || step.isExternal()) {
      module.emitError() << "expected a training step @" << functionName
                         << " with optimizer updates to guard, found none";
      return signalPassFailure();
    }
    Block &body = step.getBody().front();
    SmallVector<Operation *> updates;
    for (Operation &op : body.without_terminator())
      if (isUpdate(&op))
        updates.push_back(&op);
    if (updates.empty()) {
      step.emitError("expected optimizer updates to guard, found none");
      return signalPassFailure();
    }
    for (Operation *update : updates)
      if (isGuarded(update)) {
        update->emitError("expected an update without a guard, found one "
                          "(the step is guarded already)");
        return signalPassFailure();
      }

    // The verdict, before the first update: every gradient's elements
    // summed, the sums added, times zero.
    OpBuilder builder(updates.front());
    Location loc = step.getLoc();
    Value total;
    for (Operation *update : updates) {
      Value gradient =
          update->getOperand(contractOf(update)->effects.gradientOperand);
      auto type = llvm::cast<RankedTensorType>(gradient.getType());
      Value sum = gradient;
      if (type.getRank() > 0)
        sum = ReduceSumOp::create(
            builder, loc, gradient,
            llvm::to_vector(llvm::seq<int64_t>(0, type.getRank())),
            /*keep_dims=*/false);
      total = total ? AddOp::create(builder, loc, total, sum).getResult() : sum;
    }
    Value zero = FillOp::create(builder, loc, builder.getDenseI64ArrayAttr({}),
                                builder.getF64FloatAttr(0.0));
    Value guard = MulOp::create(builder, loc, total, zero);
    for (Operation *update : updates) {
      if (auto adamw = llvm::dyn_cast<AdamWOp>(update))
        adamw.getGuardMutable().assign(guard);
      else if (auto sgd = llvm::dyn_cast<SgdOp>(update))
        sgd.getGuardMutable().assign(guard);
      else {
        update->emitError("expected adamw or sgd to guard, found ")
            << update->getName();
        return signalPassFailure();
      }
    }
    appendMetricResult(step, guard, "update_guard");
  }

  static bool isGuarded(Operation *update) {
    if (auto adamw = llvm::dyn_cast<AdamWOp>(update))
      return static_cast<bool>(adamw.getGuard());
    if (auto sgd = llvm::dyn_cast<SgdOp>(update))
      return static_cast<bool>(sgd.getGuard());
    return false;
  }
};

} // namespace
