//===- GraphCosts.cpp - Costs of graph ops --------------------------------===//
//
// FLOP counts follow the usual conventions (a multiply-add is 2 FLOPs);
// transcendental functions count as a few FLOPs each. Costs are estimates
// for balancing and reports, not measurements.
//
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/IR/GraphOps.h"

using namespace mlir;
using namespace trellis::graph;

namespace {

int64_t bytesOf(Value value) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
}

int64_t elementsOf(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getNumElements();
}

OpCost costWithFlops(Operation *op, double flops) {
  OpCost cost = defaultCost(op, 0);
  cost.flops = flops;
  return cost;
}

} // namespace

OpCost trellis::graph::defaultCost(Operation *op, double flopsPerElement) {
  OpCost cost;
  for (Value operand : op->getOperands())
    cost.bytesRead += bytesOf(operand);
  for (Value result : op->getResults()) {
    cost.bytesWritten += bytesOf(result);
    cost.flops += flopsPerElement * elementsOf(result);
  }
  return cost;
}

// Data movement: no arithmetic, only bytes.
OpCost FillOp::getCost() { return defaultCost(*this, 0); }
OpCost BroadcastToOp::getCost() { return defaultCost(*this, 0); }
OpCost ReshapeOp::getCost() { return defaultCost(*this, 0); }
OpCost TransposeOp::getCost() { return defaultCost(*this, 0); }
OpCost SliceOp::getCost() { return defaultCost(*this, 0); }
OpCost PadOp::getCost() { return defaultCost(*this, 0); }
OpCost ConcatOp::getCost() { return defaultCost(*this, 0); }

OpCost MatmulOp::getCost() {
  ArrayRef<int64_t> lhs = getLhs().getType().getShape();
  int64_t k = lhs[lhs.size() - (getTransposeLhs() ? 2 : 1)];
  return costWithFlops(*this, 2.0 * elementsOf(getResult()) * k);
}

OpCost SoftmaxOp::getCost() { return defaultCost(*this, 5); }
OpCost SoftmaxGradOp::getCost() { return defaultCost(*this, 4); }
OpCost LayerNormOp::getCost() { return defaultCost(*this, 8); }
OpCost RmsNormOp::getCost() { return defaultCost(*this, 5); }

OpCost LayerNormGradOp::getCost() {
  return costWithFlops(*this, 12.0 * elementsOf(getInput()));
}

OpCost RmsNormGradOp::getCost() {
  return costWithFlops(*this, 9.0 * elementsOf(getInput()));
}

OpCost EmbeddingOp::getCost() {
  // Reads only the selected rows.
  OpCost cost;
  cost.bytesRead = bytesOf(getIds()) + bytesOf(getResult());
  cost.bytesWritten = bytesOf(getResult());
  return cost;
}

OpCost EmbeddingGradOp::getCost() {
  return costWithFlops(*this, elementsOf(getResultGrad()));
}

OpCost RopeOp::getCost() { return defaultCost(*this, 6); }

namespace {
/// Multiply-adds of q k^T and p v over every head: 4 B Hq S_q S_k D.
double attentionFlops(Value query, Value key) {
  ArrayRef<int64_t> q =
      llvm::cast<RankedTensorType>(query.getType()).getShape();
  ArrayRef<int64_t> k = llvm::cast<RankedTensorType>(key.getType()).getShape();
  return 4.0 * q[0] * q[2] * q[1] * k[1] * q[3];
}
} // namespace

OpCost AttentionOp::getCost() {
  return costWithFlops(*this, attentionFlops(getQuery(), getKey()));
}

OpCost AttentionGradOp::getCost() {
  // Recomputing q k^T, then dV, dP, dQ and dK: five products.
  return costWithFlops(*this, 2.5 * attentionFlops(getQuery(), getKey()));
}

OpCost AttentionBlockOp::getCost() {
  return costWithFlops(*this, attentionFlops(getQuery(), getKey()));
}

OpCost AttentionMergeOp::getCost() { return defaultCost(*this, 6); }

OpCost AttentionBlockGradOp::getCost() {
  return costWithFlops(*this, 2.5 * attentionFlops(getQuery(), getKey()));
}

OpCost PositionsOp::getCost() { return defaultCost(*this, 0); }

// Its members' flops (one per element each, as theirs); the bytes of its
// inputs and result alone: the intermediates never reach memory.
OpCost FusedElementwiseOp::getCost() {
  return defaultCost(*this, static_cast<double>(getProgram().size()));
}

OpCost CrossEntropyOp::getCost() {
  return costWithFlops(*this, 4.0 * elementsOf(getLogits()));
}

OpCost CrossEntropyGradOp::getCost() {
  return costWithFlops(*this, 4.0 * elementsOf(getLogits()));
}

OpCost AdamWOp::getCost() {
  return costWithFlops(*this, 12.0 * elementsOf(getParam()));
}

OpCost SgdOp::getCost() {
  return costWithFlops(*this, 3.0 * elementsOf(getParam()));
}
