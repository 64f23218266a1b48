//===- PipelineCost.cpp - Per-layer costs for pipeline stage splits -------===//

#include "trellis/Analysis/PipelineCost.h"

#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Regex.h"

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

std::optional<int64_t> modelPartOf(Operation *op) {
  auto name = dyn_cast<NameLoc>(op->getLoc());
  if (!name)
    return std::nullopt;
  StringRef text = name.getName().getValue();
  if (text == "embedding")
    return kEmbeddingPart;
  if (text == "head")
    return kHeadPart;
  static const llvm::Regex layerName(
      "^(transformer\\.h|model\\.layers)\\.([0-9]+)$");
  SmallVector<StringRef> groups;
  int64_t layer;
  if (!layerName.match(text, &groups) || groups[2].getAsInteger(10, layer))
    return std::nullopt;
  return layer;
}

FailureOr<ModelPipelineCost> computePipelineCost(func::FuncOp forward,
                                                 const RooflineRates &rates) {
  // Weights, gradients and the two AdamW moments.
  constexpr int64_t kStateCopies = 4;
  ModelPipelineCost cost;
  auto slot = [&](StagedModelCost &model, int64_t part) -> PartCost & {
    if (part == kEmbeddingPart)
      return model.embedding;
    if (part == kHeadPart)
      return model.head;
    if (static_cast<int64_t>(model.layers.size()) <= part)
      model.layers.resize(part + 1);
    return model.layers[part];
  };
  // Parameters pin memory on every part that uses them (tied embeddings on
  // the first and the last stage).
  llvm::DenseMap<Value, llvm::SmallSetVector<int64_t, 2>> partsUsing;
  // Parts in model order (embedding, layers, head) and, for every value an
  // op makes, the latest part that uses it.
  llvm::DenseMap<Operation *, int64_t> orderOf;
  llvm::DenseMap<Value, int64_t> lastUse;
  auto order = [](int64_t part) {
    return part == kEmbeddingPart ? 0
           : part == kHeadPart    ? std::numeric_limits<int64_t>::max()
                                  : part + 1;
  };
  WalkResult walk = forward.walk([&](Operation *op) -> WalkResult {
    if (op == forward.getOperation() || isa<func::ReturnOp>(op))
      return WalkResult::advance();
    std::optional<int64_t> part = modelPartOf(op);
    if (!part) {
      op->emitError("expected the location of a model part (embedding, "
                    "transformer.h.N, model.layers.N or head) for pipeline "
                    "stage splitting; hand-written models have none");
      return WalkResult::interrupt();
    }
    orderOf[op] = order(*part);
    for (Value operand : op->getOperands()) {
      if (isa<BlockArgument>(operand)) {
        partsUsing[operand].insert(*part);
        continue;
      }
      int64_t &last = lastUse[operand];
      last = std::max(last, order(*part));
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
    PartCost &partCost = slot(cost.parts, *part);
    partCost.time += seconds / ModelPipelineCost::forwardShare;
    partCost.memory += saved;
    slot(cost.activations, *part).memory += saved;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  for (BlockArgument argument : forward.getArguments()) {
    auto role = forward.getArgAttrOfType<StringAttr>(
        argument.getArgNumber(), graph::GraphDialect::kRoleAttrName);
    if (!role || role.getValue() != "param")
      continue;
    for (int64_t part : partsUsing.lookup(argument))
      slot(cost.parts, part).memory +=
          kStateCopies * bytesOf(argument.getType());
  }
  cost.activations.layers.resize(cost.parts.layers.size());
  // Boundary k lies between parts k and k + 1 in model order (0 is the
  // embedding); the head comes after the last layer.
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
