//===- Recompute.cpp - Each model part's forward again before its backward ===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "WeightGradients.h"

namespace trellis {
#define GEN_PASS_DEF_RECOMPUTEPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

bool inPhase(Operation *op, StringRef phase) {
  auto attr = op->getAttrOfType<StringAttr>(GraphDialect::kPhaseAttrName);
  return attr && attr.getValue() == phase;
}

struct RecomputePass : public trellis::impl::RecomputePassBase<RecomputePass> {
  using RecomputePassBase::RecomputePassBase;

  void runOnOperation() override {
    auto function = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      getOperation().emitError() << "expected a function @" << functionName
                                 << " to recompute the forward of, found none";
      return signalPassFailure();
    }
    Block &body = function.getBody().front();
    // Parts: maximal runs of forward ops of one model part.
    SmallVector<SmallVector<Operation *>> parts;
    PartAttr current;
    for (Operation &op : body.without_terminator()) {
      if (!inPhase(&op, "forward"))
        continue;
      PartAttr part = getModelPart(&op);
      if (parts.empty() || part != current)
        parts.emplace_back();
      current = part;
      parts.back().push_back(&op);
    }
    // The last part's backward follows its forward at once: nothing to
    // save by recomputing it.
    if (!parts.empty())
      parts.pop_back();
    OpBuilder builder(&getContext());
    StringAttr backward = builder.getStringAttr("backward");
    for (ArrayRef<Operation *> part : parts) {
      PartAttr partAttr = getModelPart(part.front());
      if (!partAttr)
        continue;
      // The part's first backward op: its copies go right before it.
      Operation *first = nullptr;
      for (Operation *op = part.back()->getNextNode(); op && !first;
           op = op->getNextNode())
        if (isBackwardOp(op) && getModelPart(op) == partAttr)
          first = op;
      if (!first)
        continue;
      builder.setInsertionPoint(first);
      IRMapping mapping;
      for (Operation *op : part) {
        Operation *copy = builder.clone(*op, mapping);
        copy->setAttr(GraphDialect::kPhaseAttrName, backward);
      }
      // Every backward op from there on reads the copies.
      for (Operation *op = first; op; op = op->getNextNode()) {
        if (!isBackwardOp(op))
          continue;
        for (OpOperand &operand : op->getOpOperands())
          if (Value copy = mapping.lookupOrNull(operand.get()))
            operand.set(copy);
      }
    }
    // Copies nothing reads go.
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(body.getOperations())))
      if (isOpTriviallyDead(&op))
        op.erase();
    markWeightGradients(body);
  }
};

} // namespace
