//===- GraphLocalization.cpp - Per-rank attributes of graph ops -----------===//
//
// localizeAttributes of the ops whose attributes encode global sizes: the
// partitioner calls it on the per-rank copy of an op, whose operand and
// result types are already local.
//
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace trellis::graph;

namespace {

ArrayRef<int64_t> resultShape(Operation *op) {
  return llvm::cast<RankedTensorType>(op->getResult(0).getType()).getShape();
}

int64_t elementsOf(Type type) {
  return llvm::cast<RankedTensorType>(type).getNumElements();
}

} // namespace

// Ops whose shape attribute is their result shape.
LogicalResult FillOp::localizeAttributes(TypeRange, ArrayRef<ArrayAttr>) {
  setShape(resultShape(*this));
  return success();
}

LogicalResult ReshapeOp::localizeAttributes(TypeRange, ArrayRef<ArrayAttr>) {
  setShape(resultShape(*this));
  return success();
}

LogicalResult BroadcastToOp::localizeAttributes(TypeRange,
                                                ArrayRef<ArrayAttr>) {
  setShape(resultShape(*this));
  return success();
}

// Only whole dimensions can be cut (the sharding rule keeps them unsplit),
// so offsets stay; the sizes of split dimensions become local.
LogicalResult SliceOp::localizeAttributes(TypeRange, ArrayRef<ArrayAttr>) {
  setSizes(resultShape(*this));
  return success();
}

/// The mesh axes dimension `dim` of operand `operand` is split over, or
/// null when it is whole.
ArrayAttr splitAxes(ArrayRef<ArrayAttr> operandAxes, size_t operand,
                    size_t dim) {
  if (operand >= operandAxes.size() || !operandAxes[operand] ||
      dim >= operandAxes[operand].size())
    return {};
  auto axes = llvm::dyn_cast<ArrayAttr>(operandAxes[operand][dim]);
  return axes && !axes.empty() ? axes : ArrayAttr();
}

// A split over target positions makes local losses partial sums: they
// divide by the global count. A split of the classes is combined inside.
LogicalResult CrossEntropyOp::localizeAttributes(TypeRange global,
                                                 ArrayRef<ArrayAttr> axes) {
  if (getNormalizer() == 0)
    setNormalizer(elementsOf(global[1]));
  int64_t classDim = llvm::cast<RankedTensorType>(global[0]).getRank() - 1;
  if (ArrayAttr classAxes = splitAxes(axes, 0, classDim))
    setAxesAttr(classAxes);
  return success();
}

LogicalResult CrossEntropyGradOp::localizeAttributes(TypeRange global,
                                                     ArrayRef<ArrayAttr> axes) {
  if (getNormalizer() == 0)
    setNormalizer(elementsOf(global[1]));
  int64_t classDim = llvm::cast<RankedTensorType>(global[0]).getRank() - 1;
  if (ArrayAttr classAxes = splitAxes(axes, 0, classDim))
    setAxesAttr(classAxes);
  return success();
}

// A vocabulary split: each rank holds the rows at its position.
LogicalResult EmbeddingOp::localizeAttributes(TypeRange,
                                              ArrayRef<ArrayAttr> axes) {
  if (ArrayAttr vocabAxes = splitAxes(axes, 0, 0))
    setAxesAttr(vocabAxes);
  return success();
}

// The table gradient holds this rank's vocabulary rows (its first result
// dimension's split; tensors are listed operands first, then results).
LogicalResult EmbeddingGradOp::localizeAttributes(TypeRange,
                                                  ArrayRef<ArrayAttr> axes) {
  if (ArrayAttr vocabAxes = splitAxes(axes, getNumOperands(), 0)) {
    setNumEmbeddings(resultShape(*this)[0]);
    setAxesAttr(vocabAxes);
  }
  return success();
}

// A piece of the sequence rotates by its absolute positions: the
// partitioner names the axes it is split over.
LogicalResult RopeOp::localizeAttributes(TypeRange, ArrayRef<ArrayAttr> axes) {
  if (ArrayAttr sequenceAxes = splitAxes(axes, 0, 1))
    setAxesAttr(sequenceAxes);
  return success();
}

// A piece of the position ids starts at its place.
LogicalResult PositionsOp::localizeAttributes(TypeRange,
                                              ArrayRef<ArrayAttr> axes) {
  setLength(resultShape(*this)[0]);
  if (ArrayAttr sequenceAxes = splitAxes(axes, 0, 0))
    setAxesAttr(sequenceAxes);
  return success();
}

// A piece of the queries attends from its absolute positions.
LogicalResult AttentionOp::localizeAttributes(TypeRange,
                                              ArrayRef<ArrayAttr> axes) {
  if (ArrayAttr queryAxes = splitAxes(axes, 0, 1))
    setAxesAttr(queryAxes);
  return success();
}

LogicalResult AttentionGradOp::localizeAttributes(TypeRange,
                                                  ArrayRef<ArrayAttr> axes) {
  if (ArrayAttr queryAxes = splitAxes(axes, 0, 1))
    setAxesAttr(queryAxes);
  return success();
}

// Under expert parallelism each rank holds a range of the experts: the
// axes the expert dimension is split over place it (the weight's for the
// product, the result's for the weight gradient, which also counts only
// the rank's experts).
LogicalResult ExpertMatmulOp::localizeAttributes(TypeRange,
                                                 ArrayRef<ArrayAttr> axes) {
  // A weight gathered whole holds every expert.
  setAxesAttr(splitAxes(axes, 1, 0));
  return success();
}

LogicalResult
ExpertMatmulWeightGradOp::localizeAttributes(TypeRange,
                                             ArrayRef<ArrayAttr> axes) {
  setNumExperts(resultShape(*this)[0]);
  setAxesAttr(splitAxes(axes, getNumOperands(), 0));
  return success();
}
