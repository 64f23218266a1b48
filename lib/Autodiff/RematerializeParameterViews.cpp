//===- RematerializeParameterViews.cpp - Views of weights made again ------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "WeightGradients.h"

namespace trellis {
#define GEN_PASS_DEF_REMATERIALIZEPARAMETERVIEWSPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

StringAttr phaseOf(Operation *op) {
  return op->getAttrOfType<StringAttr>(GraphDialect::kPhaseAttrName);
}

/// A layout or dtype change of one operand: what a view of a weight is.
bool isViewOp(Operation *op) {
  return llvm::isa<CastOp, SliceOp, ReshapeOp, TransposeOp>(op);
}

struct RematerializeParameterViewsPass
    : public trellis::impl::RematerializeParameterViewsPassBase<
          RematerializeParameterViewsPass> {
  using RematerializeParameterViewsPassBase::
      RematerializeParameterViewsPassBase;

  void runOnOperation() override {
    auto function = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      getOperation().emitError()
          << "expected a function of gradients @" << functionName
          << " to rematerialize the weights' views of, found none";
      return signalPassFailure();
    }
    Block &body = function.getBody().front();
    // Values made from parameters alone by forward views: a parameter, or
    // a view of one such value.
    DenseSet<Value> fromParameters;
    for (BlockArgument argument : body.getArguments()) {
      auto role = function.getArgAttrOfType<StringAttr>(
          argument.getArgNumber(), GraphDialect::kRoleAttrName);
      if (role && role.getValue() == "param")
        fromParameters.insert(argument);
    }
    DenseSet<Operation *> views;
    for (Operation &op : body.without_terminator()) {
      StringAttr phase = phaseOf(&op);
      if (!phase || phase.getValue() != "forward" || !isViewOp(&op) ||
          !fromParameters.contains(op.getOperand(0)))
        continue;
      fromParameters.insert(op.getResult(0));
      views.insert(&op);
    }
    // The backward's reads of each view, by the reader's part and phase
    // (one action of one part): each group reads a copy made right before
    // its first reader, so that the forward's view dies with the forward.
    DenseMap<std::pair<Attribute, Attribute>, IRMapping> copies;
    OpBuilder builder(&getContext());
    for (Operation &op : body.without_terminator()) {
      if (!isBackwardOp(&op))
        continue;
      PartAttr part = getModelPart(&op);
      StringAttr phase = phaseOf(&op);
      for (OpOperand &operand : op.getOpOperands()) {
        Operation *view = operand.get().getDefiningOp();
        if (!view || !views.contains(view))
          continue;
        IRMapping &mapping = copies[{part, phase}];
        // The chain of views from the parameter (or from a view the group
        // has a copy of already), copied in order.
        SmallVector<Operation *> chain;
        for (Value value = operand.get();
             value.getDefiningOp() && !mapping.contains(value);
             value = value.getDefiningOp()->getOperand(0))
          chain.push_back(value.getDefiningOp());
        builder.setInsertionPoint(&op);
        for (Operation *original : llvm::reverse(chain)) {
          Operation *copy = builder.clone(*original, mapping);
          // It runs in its readers' action: their phase and part (a
          // pipeline places it on their stage).
          copy->setAttr(GraphDialect::kPhaseAttrName, phase);
          if (part)
            setModelPart(copy, part);
        }
        operand.set(mapping.lookup(operand.get()));
      }
    }
    markWeightGradients(body);
  }
};

} // namespace
