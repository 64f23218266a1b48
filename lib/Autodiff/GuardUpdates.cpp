//===- GuardUpdates.cpp - Updates skip a step whose gradients overflowed --===//

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

/// `value` as a division by a scalar that nothing else reads (the loss
/// scale's unscale), or null.
DivOp scalarDivision(Value value) {
  auto division = value.getDefiningOp<DivOp>();
  if (!division || !division->hasOneUse() ||
      llvm::cast<RankedTensorType>(division.getRhs().getType()).getRank() != 0)
    return nullptr;
  return division;
}

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
    for (unsigned r = 0; r < step.getNumResults(); ++r)
      if (auto metric = step.getResultAttrOfType<StringAttr>(
              r, GraphDialect::kMetricAttrName);
          metric && metric.getValue() == "update_guard") {
        step.emitError("expected a step without an update_guard result, "
                       "found one (the step is guarded already)");
        return signalPassFailure();
      }
    Block &body = step.getBody().front();
    SmallVector<Operation *> updates;
    for (Operation &op : body.without_terminator())
      if (const OpContract *contract = contractOf(&op);
          contract && contract->isUpdate()) {
        if (contract->effects.gradientScaleOperand < 0 ||
            contract->hasGradientScale(op.getNumOperands())) {
          op.emitError("expected an update that takes a grad_scale and has "
                       "none, found ")
              << op.getName() << " with " << op.getNumOperands() << " operands";
          return signalPassFailure();
        }
        updates.push_back(&op);
      }
    if (updates.empty()) {
      step.emitError("expected optimizer updates to guard, found none");
      return signalPassFailure();
    }

    // Each update's gradient; a division by a scalar becomes the update's
    // grad_scale, so the update unscales as it reads.
    OpBuilder builder(updates.front());
    Location loc = step.getLoc();
    SmallVector<Value> divisors;
    for (Operation *update : updates) {
      OpOperand &gradient =
          update->getOpOperand(contractOf(update)->effects.gradientOperand);
      Value divisor;
      if (DivOp division = scalarDivision(gradient.get())) {
        gradient.set(division.getLhs());
        divisor = division.getRhs();
        division.erase();
      }
      divisors.push_back(divisor);
    }

    // The verdict, before the first update: every gradient's elements
    // summed, the sums added, times zero (0, or NaN when one is not
    // finite).
    Value total;
    for (Operation *update : updates) {
      Value gradient =
          update->getOperand(contractOf(update)->effects.gradientOperand);
      Value sum = gradient;
      if (auto type = llvm::cast<RankedTensorType>(gradient.getType());
          type.getRank() > 0)
        sum = ReduceSumOp::create(
            builder, loc, gradient,
            llvm::to_vector(llvm::seq<int64_t>(0, type.getRank())),
            /*keep_dims=*/false);
      total = total ? AddOp::create(builder, loc, total, sum).getResult() : sum;
    }
    auto scalar = [&](double value) {
      return FillOp::create(builder, loc, builder.getDenseI64ArrayAttr({}),
                            builder.getF64FloatAttr(value))
          .getResult();
    };
    Value guard = MulOp::create(builder, loc, total, scalar(0.0));

    // Each update's grad_scale: its divisor (else 1) plus the guard.
    llvm::DenseMap<Value, Value> scaleOf;
    for (auto [update, divisor] : llvm::zip(updates, divisors)) {
      Value &scale = scaleOf[divisor];
      if (!scale)
        scale =
            AddOp::create(builder, loc, divisor ? divisor : scalar(1.0), guard);
      update->insertOperands(update->getNumOperands(), scale);
    }
    // Not reported: the runtime reads it to tell whether the updates
    // applied (Plan::updateGuardResult).
    appendMetricResult(step, guard, "update_guard", std::nullopt);
  }
};

} // namespace
