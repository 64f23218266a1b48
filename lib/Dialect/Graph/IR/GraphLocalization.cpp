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

int64_t dimOf(Type type, int64_t dim) {
  return llvm::cast<RankedTensorType>(type).getDimSize(dim);
}

} // namespace

// Ops whose shape attribute is their result shape.
LogicalResult FillOp::localizeAttributes(TypeRange) {
  setShape(resultShape(*this));
  return success();
}

LogicalResult ReshapeOp::localizeAttributes(TypeRange) {
  setShape(resultShape(*this));
  return success();
}

LogicalResult BroadcastToOp::localizeAttributes(TypeRange) {
  setShape(resultShape(*this));
  return success();
}

// Only whole dimensions can be cut (the sharding rule keeps them unsplit),
// so offsets stay; the sizes of split dimensions become local.
LogicalResult SliceOp::localizeAttributes(TypeRange) {
  setSizes(resultShape(*this));
  return success();
}

// A split over target positions makes local losses partial sums: they
// divide by the global count.
LogicalResult CrossEntropyOp::localizeAttributes(TypeRange global) {
  if (getNormalizer() == 0)
    setNormalizer(elementsOf(global[1]));
  return success();
}

LogicalResult CrossEntropyGradOp::localizeAttributes(TypeRange global) {
  if (getNormalizer() == 0)
    setNormalizer(elementsOf(global[1]));
  return success();
}

LogicalResult EmbeddingOp::localizeAttributes(TypeRange global) {
  if (getTable().getType().getShape()[0] != dimOf(global[0], 0))
    return emitOpError("a vocabulary split across ranks needs a per-rank "
                       "vocab_offset, which the partitioner does not "
                       "derive yet");
  return success();
}

LogicalResult EmbeddingGradOp::localizeAttributes(TypeRange) {
  if (resultShape(*this)[0] != getNumEmbeddings())
    return emitOpError("a vocabulary split across ranks needs a per-rank "
                       "vocab_offset, which the partitioner does not "
                       "derive yet");
  return success();
}
