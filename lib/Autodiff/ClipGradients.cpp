//===- ClipGradients.cpp - Updates see gradients of a bounded global norm -===//

#include "trellis/Autodiff/Passes.h"

#include "StepResults.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

namespace trellis {
#define GEN_PASS_DEF_CLIPGRADIENTSPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

/// PyTorch's clip_grad_norm_ guard against a zero norm.
constexpr double kNormEpsilon = 1e-6;

struct ClipGradientsPass
    : public trellis::impl::ClipGradientsPassBase<ClipGradientsPass> {
  using ClipGradientsPassBase::ClipGradientsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!std::isfinite(maxNorm) || maxNorm <= 0) {
      module.emitError() << "--clip-grad: expected a finite number > 0, found "
                         << llvm::formatv(
                                "{0}", llvm::format("%g", maxNorm.getValue()));
      return signalPassFailure();
    }
    auto step = module.lookupSymbol<func::FuncOp>(functionName);
    if (!step || step.isExternal()) {
      module.emitError() << "--clip-grad: expected a training step @"
                         << functionName
                         << " with optimizer updates, found none";
      return signalPassFailure();
    }
    Block &body = step.getBody().front();
    // Each update's gradient operand, in step order.
    SmallVector<OpOperand *> gradients;
    for (Operation &op : body.without_terminator())
      if (const OpContract *contract = contractOf(&op);
          contract && contract->isUpdate())
        gradients.push_back(
            &op.getOpOperand(contract->effects.gradientOperand));
    if (gradients.empty()) {
      step.emitError("--clip-grad: expected optimizer updates to clip the "
                     "gradients of, found none");
      return signalPassFailure();
    }

    // The norm, before the first update.
    OpBuilder builder(gradients.front()->getOwner());
    Location loc = step.getLoc();
    Value total;
    for (OpOperand *gradient : gradients) {
      Value value = gradient->get();
      auto type = llvm::cast<RankedTensorType>(value.getType());
      SmallVector<int64_t> dims =
          llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
      Value squares = MulOp::create(builder, loc, value, value);
      Value sum = type.getRank() == 0
                      ? squares
                      : ReduceSumOp::create(builder, loc, squares, dims,
                                            /*keep_dims=*/false)
                            .getResult();
      // An update that divides its gradient by a grad_scale s sees
      // squares s^2 smaller.
      Operation *update = gradient->getOwner();
      const OpContract *contract = contractOf(update);
      if (contract->hasGradientScale(update->getNumOperands())) {
        Value scale =
            update->getOperand(contract->effects.gradientScaleOperand);
        sum = DivOp::create(builder, loc, sum,
                            MulOp::create(builder, loc, scale, scale));
      }
      total = total ? AddOp::create(builder, loc, total, sum).getResult() : sum;
    }
    Value norm = SqrtOp::create(builder, loc, total);
    auto scalar = [&](double value) {
      return FillOp::create(builder, loc, builder.getDenseI64ArrayAttr({}),
                            builder.getF64FloatAttr(value))
          .getResult();
    };
    Value limit = scalar(maxNorm);
    Value padded = AddOp::create(builder, loc, norm, scalar(kNormEpsilon));
    Value scale = DivOp::create(builder, loc, limit,
                                MaximumOp::create(builder, loc, padded, limit));
    for (OpOperand *gradient : gradients) {
      builder.setInsertionPoint(gradient->getOwner());
      gradient->set(MulOp::create(builder, loc, gradient->get(), scale));
    }

    // The norm is a result of the step.
    appendMetricResult(step, norm, "grad_norm",
                       MetricReport{"grad norm", MetricSummary::Value});
  }
};

} // namespace
