//===- RematerializeParameterViews.cpp - Views of weights made again ------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "WeightGradients.h"

#include <functional>
#include <map>

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

bool inBackward(Operation *op) {
  StringAttr phase = phaseOf(op);
  return phase &&
         (phase.getValue() == "backward" || phase.getValue() == "weight");
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
    struct Group {
      PartAttr part;
      StringAttr phase;
      std::pair<const void *, const void *> key() const {
        return {part.getAsOpaquePointer(), phase.getAsOpaquePointer()};
      }
    };
    std::map<std::pair<const void *, const void *>, IRMapping> copies;
    OpBuilder builder(&getContext());
    std::function<Value(Value, Group, Operation *)> copyOf =
        [&](Value value, Group group, Operation *before) -> Value {
      Operation *view = value.getDefiningOp();
      if (!view)
        return value; // the parameter itself
      IRMapping &mapping = copies[group.key()];
      if (Value made = mapping.lookupOrNull(value))
        return made;
      Value operand = copyOf(view->getOperand(0), group, before);
      builder.setInsertionPoint(before);
      Operation *copy = builder.clone(*view, mapping);
      copy->setOperand(0, operand);
      // It runs in its readers' action: their phase and part (a pipeline
      // places it on their stage).
      copy->setAttr(GraphDialect::kPhaseAttrName, group.phase);
      if (group.part)
        setModelPart(copy, group.part);
      return copy->getResult(0);
    };
    for (Operation &op : body.without_terminator()) {
      if (!inBackward(&op))
        continue;
      for (OpOperand &operand : op.getOpOperands()) {
        Operation *view = operand.get().getDefiningOp();
        if (!view || !views.contains(view))
          continue;
        Group group{getModelPart(&op), phaseOf(&op)};
        operand.set(copyOf(operand.get(), group, &op));
      }
    }
    markWeightGradients(body);
  }
};

} // namespace
