//===- StageTransfers.cpp - Values sent between pipeline stages -----------===//

#include "Splitter.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include <limits>

using namespace mlir;

namespace trellis::pipeline {

void Splitter::sendInPieces() {
  if (config_.pieceAxis.empty())
    return;
  SmallVector<Operation *> producers;
  for (Operation &op : body_.without_terminator())
    if (op.getNumResults() == 1 && placement_[&op].action &&
        !graph::makesStepTotal(&op) &&
        op.hasAttr(TrellisDialect::kLocalLayoutAttrName))
      producers.push_back(&op);
  for (Operation *producer : producers) {
    auto layout = producer->getAttrOfType<ShardingAttr>(
        TrellisDialect::kLocalLayoutAttrName);
    if (layout.usesAxis(config_.pieceAxis))
      continue;
    MeshOp mesh = lookupMesh(producer, layout.getMeshName(),
                             [&] { return producer->emitError(); });
    std::optional<size_t> axis =
        mesh ? mesh.getMesh().getAxisIndex(config_.pieceAxis) : std::nullopt;
    if (!axis)
      continue;
    int64_t pieces = mesh.getMesh().getAxes()[*axis].getSize();
    Value value = producer->getResult(0);
    auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
    if (pieces < 2 || !type || !type.getElementType().isF32())
      continue;
    // Cut along the last dimension that divides.
    std::optional<int64_t> dim;
    for (int64_t d = type.getRank() - 1; d >= 0 && !dim; --d)
      if (type.getDimSize(d) % pieces == 0)
        dim = d;
    if (!dim)
      continue;
    // Readers of the micro-batch on each other rank.
    int64_t from = *placement_[producer].ranks.begin();
    std::map<int64_t, SmallVector<OpOperand *>> readers;
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (user == body_.getTerminator() || !placement_[user].action)
        continue;
      int64_t rank = *placement_[user].ranks.begin();
      if (rank != from)
        readers[rank].push_back(&use);
    }
    if (readers.empty())
      continue;
    OpBuilder builder(producer->getContext());
    ArrayAttr axes = builder.getStrArrayAttr({config_.pieceAxis});
    FlatSymbolRefAttr meshName = layout.getMeshName();
    SmallVector<int64_t> pieceShape(type.getShape());
    pieceShape[*dim] /= pieces;
    builder.setInsertionPointAfter(producer);
    auto slice = SliceShardOp::create(builder, producer->getLoc(),
                                      type.clone(pieceShape), value, meshName,
                                      axes, builder.getI64IntegerAttr(*dim));
    slice->setAttr(graph::GraphDialect::kPhaseAttrName,
                   producer->getAttr(graph::GraphDialect::kPhaseAttrName));
    placement_[slice] = placement_[producer];
    for (auto &[rank, uses] : readers) {
      // Before every reader in the block; in the action that runs first.
      Operation *firstInBlock = uses.front()->getOwner();
      Operation *firstToRun = firstInBlock;
      for (OpOperand *use : uses) {
        if (use->getOwner()->isBeforeInBlock(firstInBlock))
          firstInBlock = use->getOwner();
        if (runsBefore(use->getOwner(), firstToRun))
          firstToRun = use->getOwner();
      }
      builder.setInsertionPoint(firstInBlock);
      auto gather = AllGatherOp::create(builder, producer->getLoc(), type,
                                        slice.getResult(), meshName, axes,
                                        builder.getI64IntegerAttr(*dim));
      gather->setAttr(graph::GraphDialect::kPhaseAttrName,
                      firstToRun->getAttr(graph::GraphDialect::kPhaseAttrName));
      placement_[gather] = placement_[firstToRun];
      for (OpOperand *use : uses)
        use->set(gather.getResult());
    }
  }
}

Operation *Splitter::firstReader(const StageTransfer &transfer) {
  Operation *first = nullptr;
  Operation *terminator = body_.getTerminator();
  for (Operation *user : transfer.value.getUsers())
    if (user != terminator && placement_[user].ranks.count(transfer.to) &&
        (!first || runsBefore(user, first)))
      first = user;
  return first;
}

} // namespace trellis::pipeline
