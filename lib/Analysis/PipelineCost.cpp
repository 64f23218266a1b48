//===- PipelineCost.cpp - Per-layer costs for pipeline stage splits -------===//

#include "trellis/Analysis/PipelineCost.h"

#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <limits>

using namespace mlir;

namespace trellis {

namespace {

int64_t bytesOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements() *
         std::max<int64_t>(1, tensor.getElementTypeBitWidth() / 8);
}

} // namespace

FailureOr<ModelPipelineCost> computePipelineCost(func::FuncOp forward,
                                                 const RooflineRates &rates) {
  // Weights, gradients and the two AdamW moments.
  constexpr int64_t kStateCopies = 4;
  ModelPipelineCost cost;
  auto slot = [&](StagedModelCost &model, graph::PartAttr part) -> PartCost & {
    if (part.isEmbedding())
      return model.embedding;
    if (part.isHead())
      return model.head;
    if (static_cast<int64_t>(model.layers.size()) <= part.getLayer())
      model.layers.resize(part.getLayer() + 1);
    return model.layers[part.getLayer()];
  };
  // Parameters pin memory on every part that uses them (tied embeddings on
  // the first and the last stage).
  llvm::DenseMap<Value, llvm::SmallSetVector<graph::PartAttr, 2>> partsUsing;
  // For every op its part's model order, and for every value an op makes
  // the latest part (in model order) that uses it.
  llvm::DenseMap<Operation *, int64_t> orderOf;
  llvm::DenseMap<Value, int64_t> lastUse;
  // Ops come in model order; the latest part seen so far, and its first op.
  graph::PartAttr latest;
  Operation *latestFirstOp = nullptr;
  llvm::DenseMap<int64_t, Operation *> firstOpOfLayer;
  WalkResult walk = forward.walk([&](Operation *op) -> WalkResult {
    if (op == forward.getOperation() || isa<func::ReturnOp>(op))
      return WalkResult::advance();
    graph::PartAttr part = graph::getModelPart(op);
    if (!part) {
      op->emitError("expected a model part for pipeline stage splitting: a "
                    "graph.part attribute (#graph.part<embedding>, "
                    "#graph.part<layer N> or #graph.part<head>), found none");
      return WalkResult::interrupt();
    }
    if (latest && part.getOrder() < latest.getOrder()) {
      op->emitError() << "expected model parts in model order (embedding, "
                         "layers 0, 1, ..., head): an op of the "
                      << part.str() << " follows the " << latest.str();
      return WalkResult::interrupt();
    }
    if (part != latest) {
      latest = part;
      latestFirstOp = op;
    }
    if (part.isLayer())
      firstOpOfLayer.try_emplace(part.getLayer(), latestFirstOp);
    orderOf[op] = part.getOrder();
    for (Value operand : op->getOperands()) {
      if (isa<BlockArgument>(operand)) {
        partsUsing[operand].insert(part);
        continue;
      }
      int64_t &last = lastUse[operand];
      last = std::max(last, part.getOrder());
    }
    double seconds = 0;
    if (auto costly = dyn_cast<graph::CostOpInterface>(op)) {
      graph::OpCost opCost = costly.getCost();
      seconds = std::max(opCost.flops / rates.flopsPerSecond,
                         (opCost.bytesRead + opCost.bytesWritten) /
                             rates.bytesPerSecond);
    }
    int64_t saved = 0;
    for (Type type : op->getResultTypes())
      saved += bytesOf(type);
    PartCost &partCost = slot(cost.parts, part);
    partCost.time += seconds / ModelPipelineCost::forwardShare;
    partCost.memory += saved;
    slot(cost.activations, part).memory += saved;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // Layers are numbered 0, 1, ... without gaps.
  for (int64_t layer = 0; layer < static_cast<int64_t>(cost.parts.layers.size());
       ++layer)
    if (!firstOpOfLayer.count(layer)) {
      int64_t next = layer + 1;
      while (!firstOpOfLayer.count(next))
        ++next;
      return firstOpOfLayer[next]->emitError()
             << "expected layers numbered 0, 1, ... without gaps, found no "
                "op of layer "
             << layer << " before layer " << next;
    }
  for (BlockArgument argument : forward.getArguments()) {
    auto role = forward.getArgAttrOfType<StringAttr>(
        argument.getArgNumber(), graph::GraphDialect::kRoleAttrName);
    if (!role || role.getValue() != "param")
      continue;
    for (graph::PartAttr part : partsUsing.lookup(argument))
      slot(cost.parts, part).memory +=
          kStateCopies * bytesOf(argument.getType());
  }
  cost.activations.layers.resize(cost.parts.layers.size());
  // Boundary k lies between parts k and k + 1 in model order (0 is the
  // embedding); the head (order INT64_MAX) comes after the last layer.
  int64_t headOrder = static_cast<int64_t>(cost.parts.layers.size()) + 1;
  std::vector<double> crossing(headOrder, 0.0);
  for (auto [value, last] : lastUse) {
    int64_t from = orderOf.lookup(value.getDefiningOp());
    int64_t to = std::min(last, headOrder);
    from = std::min(from, headOrder);
    for (int64_t boundary = from; boundary < to; ++boundary)
      crossing[boundary] += bytesOf(value.getType());
  }
  for (double bytes : crossing)
    cost.boundaryBytes = std::max(cost.boundaryBytes, bytes);
  return cost;
}

} // namespace trellis
