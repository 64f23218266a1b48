//===- WeightGradients.cpp - The weight-gradient half of a backward -------===//

#include "WeightGradients.h"

#include "trellis/Dialect/Graph/IR/GraphOps.h"

using namespace mlir;
using namespace trellis::graph;

bool trellis::isBackwardOp(Operation *op) {
  auto phase = op->getAttrOfType<StringAttr>(GraphDialect::kPhaseAttrName);
  return phase &&
         (phase.getValue() == "backward" || phase.getValue() == "weight");
}

void trellis::markWeightGradients(Block &body, ArrayRef<Operation *> partSums) {
  StringAttr weight =
      StringAttr::get(body.getParentOp()->getContext(), "weight");
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    auto phase = op.getAttrOfType<StringAttr>(GraphDialect::kPhaseAttrName);
    PartAttr part = getModelPart(&op);
    if (!phase || phase.getValue() != "backward" || op.use_empty() || !part)
      continue;
    bool onlyWeights = llvm::all_of(op.getUsers(), [&](Operation *user) {
      auto userPhase =
          user->getAttrOfType<StringAttr>(GraphDialect::kPhaseAttrName);
      return !userPhase || llvm::is_contained(partSums, user) ||
             (userPhase == weight && getModelPart(user) == part);
    });
    if (onlyWeights)
      op.setAttr(GraphDialect::kPhaseAttrName, weight);
  }
}
