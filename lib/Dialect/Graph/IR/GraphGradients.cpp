//===- GraphGradients.cpp - Vector-Jacobian products of graph ops ---------===//
//
// buildGradients of every graph op. A rule receives the gradient of each
// result (null when the result does not reach the loss) and pushes one
// gradient per operand (null for operands that are not differentiable).
//
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

using namespace mlir;
using namespace trellis::graph;

namespace {

ArrayRef<int64_t> shapeOf(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getShape();
}

bool isFloatTensor(Value value) {
  return llvm::isa<FloatType>(
      llvm::cast<RankedTensorType>(value.getType()).getElementType());
}

/// Sums `grad` (of a broadcast result) down to `shape`: leading dimensions
/// `shape` lacks, and dimensions where `shape` has 1, are summed away.
Value reduceToShape(OpBuilder &b, Location loc, Value grad,
                    ArrayRef<int64_t> shape) {
  ArrayRef<int64_t> from = shapeOf(grad);
  if (from == shape)
    return grad;
  size_t lead = from.size() - shape.size();
  SmallVector<int64_t> dims;
  for (size_t d = 0; d < from.size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && from[d] != 1))
      dims.push_back(d);
  Value sum = ReduceSumOp::create(b, loc, grad, dims, /*keep_dims=*/true);
  return ReshapeOp::create(b, loc, sum, shape);
}

/// Broadcasts the gradient of a reduction back to the input shape.
Value expandReduced(OpBuilder &b, Location loc, Value grad,
                    ArrayRef<int64_t> inputShape, ArrayRef<int64_t> dims) {
  SmallVector<int64_t> kept(inputShape);
  for (int64_t d : dims)
    kept[d] = 1;
  Value reshaped = ReshapeOp::create(b, loc, grad, kept);
  return BroadcastToOp::create(b, loc, reshaped, inputShape);
}

/// Swaps the last two dimensions.
Value transposeLastTwo(OpBuilder &b, Location loc, Value value) {
  size_t rank = shapeOf(value).size();
  SmallVector<int64_t> perm;
  for (size_t d = 0; d < rank; ++d)
    perm.push_back(d);
  std::swap(perm[rank - 1], perm[rank - 2]);
  return TransposeOp::create(b, loc, value, perm);
}

/// Collapses [batch..., rows, cols] into [batch * rows, cols].
Value flattenToMatrix(OpBuilder &b, Location loc, Value value) {
  ArrayRef<int64_t> shape = shapeOf(value);
  int64_t rows = 1;
  for (int64_t size : shape.drop_back())
    rows *= size;
  return ReshapeOp::create(b, loc, value, {rows, shape.back()});
}

LogicalResult noGradient(Operation *op) {
  return op->emitOpError()
         << "has no gradient rule: it is a gradient or optimizer op, and "
            "higher-order differentiation is not supported";
}

} // namespace

//===----------------------------------------------------------------------===//
// Constants and elementwise ops
//===----------------------------------------------------------------------===//

LogicalResult FillOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                     SmallVectorImpl<Value> &) {
  return success();
}

LogicalResult ConstantOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                         SmallVectorImpl<Value> &) {
  return success();
}

LogicalResult PositionsOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                          SmallVectorImpl<Value> &) {
  return success();
}

LogicalResult AddOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &grads) {
  grads.push_back(reduceToShape(b, getLoc(), dy[0], shapeOf(getLhs())));
  grads.push_back(reduceToShape(b, getLoc(), dy[0], shapeOf(getRhs())));
  return success();
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  grads.push_back(reduceToShape(b, loc, dy[0], shapeOf(getLhs())));
  Value negated = NegOp::create(b, loc, dy[0]);
  grads.push_back(reduceToShape(b, loc, negated, shapeOf(getRhs())));
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value lhsGrad = MulOp::create(b, loc, dy[0], getRhs());
  Value rhsGrad = MulOp::create(b, loc, dy[0], getLhs());
  grads.push_back(reduceToShape(b, loc, lhsGrad, shapeOf(getLhs())));
  grads.push_back(reduceToShape(b, loc, rhsGrad, shapeOf(getRhs())));
  return success();
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b.
  Value quotient = DivOp::create(b, loc, dy[0], getRhs());
  Value rhsGrad =
      NegOp::create(b, loc, MulOp::create(b, loc, quotient, getResult()));
  grads.push_back(reduceToShape(b, loc, quotient, shapeOf(getLhs())));
  grads.push_back(reduceToShape(b, loc, rhsGrad, shapeOf(getRhs())));
  return success();
}

LogicalResult MaximumOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                        SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  // Ties go to the left operand.
  Value lhsWins = EqualMaskOp::create(b, loc, getLhs(), getResult());
  Value lhsGrad = MulOp::create(b, loc, dy[0], lhsWins);
  Value rhsGrad = SubOp::create(b, loc, dy[0], lhsGrad);
  grads.push_back(reduceToShape(b, loc, lhsGrad, shapeOf(getLhs())));
  grads.push_back(reduceToShape(b, loc, rhsGrad, shapeOf(getRhs())));
  return success();
}

LogicalResult EqualMaskOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                          SmallVectorImpl<Value> &grads) {
  // Piecewise constant: the gradient is zero almost everywhere.
  grads.append({Value(), Value()});
  return success();
}

// A cast's gradient is cast back to the input's element type (a bf16
// compute copy of an f32 parameter gives an f32 gradient).
LogicalResult CastOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                     SmallVectorImpl<Value> &grads) {
  std::optional<trellis::ElementType> from = toElementType(
      llvm::cast<RankedTensorType>(getInput().getType()).getElementType());
  auto back = CastOp::create(b, getLoc(), dy[0],
                             b.getStringAttr(trellis::elementTypeName(
                                 from.value_or(trellis::ElementType::F32))));
  if (getOperation()->hasAttr(GraphDialect::kReduceFirstAttrName))
    back->setAttr(GraphDialect::kReduceFirstAttrName, b.getUnitAttr());
  grads.push_back(back);
  return success();
}

// Each micro-batch's share of a sum has the sum's gradient.
LogicalResult MicrobatchSumOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                              SmallVectorImpl<Value> &grads) {
  grads.push_back(dy[0]);
  return success();
}

LogicalResult ScaleOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                      SmallVectorImpl<Value> &grads) {
  grads.push_back(ScaleOp::create(b, getLoc(), dy[0], getFactorAttr()));
  return success();
}

// The unary ops' gradients are their ODS class's (Graph_UnaryOp in
// GraphOps.td): one definition for the family.

//===----------------------------------------------------------------------===//
// Reductions and broadcasting
//===----------------------------------------------------------------------===//

LogicalResult ReduceSumOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &grads) {
  grads.push_back(
      expandReduced(b, getLoc(), dy[0], shapeOf(getInput()), getDims()));
  return success();
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                           SmallVectorImpl<Value> &grads) {
  int64_t count = 1;
  for (int64_t d : getDims())
    count *= shapeOf(getInput())[d];
  Value expanded =
      expandReduced(b, getLoc(), dy[0], shapeOf(getInput()), getDims());
  grads.push_back(
      ScaleOp::create(b, getLoc(), expanded, b.getF64FloatAttr(1.0 / count)));
  return success();
}

LogicalResult ReduceMaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &grads) {
  // Every element equal to the maximum receives the gradient.
  Location loc = getLoc();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  Value maxima = expandReduced(b, loc, getResult(), shape, getDims());
  Value mask = EqualMaskOp::create(b, loc, getInput(), maxima);
  Value expanded = expandReduced(b, loc, dy[0], shape, getDims());
  grads.push_back(MulOp::create(b, loc, expanded, mask));
  return success();
}

LogicalResult BroadcastToOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                            SmallVectorImpl<Value> &grads) {
  grads.push_back(reduceToShape(b, getLoc(), dy[0], shapeOf(getInput())));
  return success();
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                        SmallVectorImpl<Value> &grads) {
  if (!isFloatTensor(getInput())) {
    grads.push_back(Value());
    return success();
  }
  grads.push_back(ReshapeOp::create(b, getLoc(), dy[0], shapeOf(getInput())));
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &grads) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, d] : llvm::enumerate(perm))
    inverse[d] = i;
  grads.push_back(TransposeOp::create(b, getLoc(), dy[0], inverse));
  return success();
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                      SmallVectorImpl<Value> &grads) {
  ArrayRef<int64_t> shape = shapeOf(getInput());
  SmallVector<int64_t> high;
  for (size_t d = 0; d < shape.size(); ++d)
    high.push_back(shape[d] - getOffsets()[d] - getSizes()[d]);
  grads.push_back(PadOp::create(b, getLoc(), dy[0], getOffsets(), high));
  return success();
}

LogicalResult PadOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &grads) {
  grads.push_back(
      SliceOp::create(b, getLoc(), dy[0], getLow(), shapeOf(getInput())));
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &grads) {
  int64_t offset = 0;
  int64_t dim = getDim();
  for (Value input : getInputs()) {
    ArrayRef<int64_t> shape = shapeOf(input);
    SmallVector<int64_t> offsets(shape.size(), 0);
    offsets[dim] = offset;
    grads.push_back(SliceOp::create(b, getLoc(), dy[0], offsets, shape));
    offset += shape[dim];
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &grads) {
  // A gradient's product written in f32 comes after the autodiff.
  if (getF32Result())
    return noGradient(*this);
  Location loc = getLoc();
  Value lhs = getLhs(), rhs = getRhs(), grad = dy[0];
  bool transposeLhs = getTransposeLhs(), transposeRhs = getTransposeRhs();

  // lhs: dy rhs_eff^T, transposed back when lhs is stored transposed.
  Value lhsGrad = MatmulOp::create(b, loc, grad, rhs, false, !transposeRhs);
  if (transposeLhs)
    lhsGrad = transposeLastTwo(b, loc, lhsGrad);
  grads.push_back(lhsGrad);

  // rhs: lhs_eff^T dy (or its transpose). A 2-D rhs shared by a batch sums
  // over the batch: fold the batch into the rows first.
  bool sharedRhs = shapeOf(rhs).size() == 2 && shapeOf(lhs).size() > 2;
  if (sharedRhs) {
    if (transposeLhs)
      lhs = transposeLastTwo(b, loc, lhs);
    lhs = flattenToMatrix(b, loc, lhs);
    grad = flattenToMatrix(b, loc, grad);
    transposeLhs = false;
  }
  Value rhsGrad =
      transposeRhs
          ? MatmulOp::create(b, loc, grad, lhs, true, transposeLhs).getResult()
          : MatmulOp::create(b, loc, lhs, grad, !transposeLhs, false)
                .getResult();
  grads.push_back(rhsGrad);
  return success();
}

//===----------------------------------------------------------------------===//
// Neural-network layers
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                        SmallVectorImpl<Value> &grads) {
  grads.push_back(SoftmaxGradOp::create(b, getLoc(), getResult(), dy[0]));
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &grads) {
  auto grad = LayerNormGradOp::create(b, getLoc(), getInput(), getWeight(),
                                      dy[0], getEpsilonAttr());
  grads.append({grad.getInputGrad(), grad.getWeightGrad(), grad.getBiasGrad()});
  return success();
}

LogicalResult RmsNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                        SmallVectorImpl<Value> &grads) {
  auto grad = RmsNormGradOp::create(b, getLoc(), getInput(), getWeight(), dy[0],
                                    getEpsilonAttr());
  grads.append({grad.getInputGrad(), grad.getWeightGrad()});
  return success();
}

LogicalResult EmbeddingOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &grads) {
  grads.push_back(EmbeddingGradOp::create(
      b, getLoc(), getIds(), dy[0], shapeOf(getTable())[0], getVocabOffset(),
      getAxesAttr(), getPaddingIdxAttr()));
  grads.push_back(Value());
  return success();
}

LogicalResult RopeOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                     SmallVectorImpl<Value> &grads) {
  // A rotation's transpose is the inverse rotation.
  grads.push_back(RopeOp::create(b, getLoc(), dy[0], getFrequenciesAttr(),
                                 b.getBoolAttr(!getInverse()), ArrayAttr(),
                                 getChunksAttr(), getInterleavedAttr()));
  return success();
}

LogicalResult AttentionOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &grads) {
  auto grad = AttentionGradOp::create(
      b, getLoc(), getQuery(), getKey(), getValue(), dy[0], getSlopes(),
      getSinks(), getScaleAttr(), getCausalAttr(), ArrayAttr(), getChunksAttr(),
      getWindowAttr(), getSoftcapAttr());
  grads.append({grad.getQueryGrad(), grad.getKeyGrad(), grad.getValueGrad()});
  // ALiBi's slopes are constants: no gradient.
  if (getSlopes())
    grads.push_back(Value());
  if (getSinks())
    grads.push_back(grad.getSinksGrad());
  return success();
}

LogicalResult CrossEntropyOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                             SmallVectorImpl<Value> &grads) {
  grads.push_back(CrossEntropyGradOp::create(b, getLoc(), getLogits(),
                                             getTargets(), dy[0],
                                             getNormalizer(), getAxesAttr()));
  grads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

LogicalResult MoeRouteOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                         SmallVectorImpl<Value> &grads) {
  // The experts are ids: only the weights carry a gradient.
  grads.push_back(
      dy[0] ? MoeRouteGradOp::create(b, getLoc(), getLogits(), getExperts(),
                                     dy[0], getTopKAttr(), getScoringAttr(),
                                     getNormalizeAttr(), getScalingAttr())
                  .getResult()
            : Value());
  // The bias only ranks the experts: the weights do not depend on it.
  if (getBias())
    grads.push_back(Value());
  return success();
}

LogicalResult ExpertMatmulOp::buildGradients(OpBuilder &b, ArrayRef<Value> dy,
                                             SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value lhs = getLhs(), experts = getExperts();
  // Each slot's row gradient through the same expert's matrix, transposed;
  // a row each token's slots shared sums its slots' gradients in order.
  Value lhsGrad = ExpertMatmulOp::create(b, loc, dy[0], getWeight(), experts,
                                         !getTransposeRhs(), getAxesAttr(),
                                         getDispatchAttr());
  if (shapeOf(lhs).size() == shapeOf(experts).size())
    lhsGrad = ReduceSumOp::create(
        b, loc, lhsGrad, ArrayRef<int64_t>{int64_t(shapeOf(lhs).size()) - 1},
        /*keep_dims=*/false);
  grads.push_back(lhsGrad);
  grads.push_back(ExpertMatmulWeightGradOp::create(
      b, loc, lhs, dy[0], experts, shapeOf(getWeight())[0], getTransposeRhs(),
      getAxesAttr(), getDispatchAttr()));
  grads.push_back(Value());
  return success();
}

LogicalResult ExpertCountsOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                             SmallVectorImpl<Value> &grads) {
  grads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Ops without a gradient: gradients of gradients, optimizers
//===----------------------------------------------------------------------===//

#define GRAPH_NO_GRADIENT(OP)                                                  \
  LogicalResult OP::buildGradients(OpBuilder &, ArrayRef<Value>,               \
                                   SmallVectorImpl<Value> &) {                 \
    return noGradient(*this);                                                  \
  }
GRAPH_NO_GRADIENT(UnaryGradOp)
GRAPH_NO_GRADIENT(SoftmaxGradOp)
GRAPH_NO_GRADIENT(LayerNormGradOp)
GRAPH_NO_GRADIENT(RmsNormGradOp)
GRAPH_NO_GRADIENT(EmbeddingGradOp)
GRAPH_NO_GRADIENT(AttentionGradOp)
GRAPH_NO_GRADIENT(AttentionBlockOp)
GRAPH_NO_GRADIENT(AttentionMergeOp)
GRAPH_NO_GRADIENT(AttentionBlockGradOp)
GRAPH_NO_GRADIENT(FusedElementwiseOp)
GRAPH_NO_GRADIENT(CrossEntropyGradOp)
GRAPH_NO_GRADIENT(MoeRouteGradOp)
GRAPH_NO_GRADIENT(ExpertBiasUpdateOp)
GRAPH_NO_GRADIENT(ExpertMatmulWeightGradOp)
GRAPH_NO_GRADIENT(MatmulAccumulateOp)
GRAPH_NO_GRADIENT(AdamWOp)
GRAPH_NO_GRADIENT(SgdOp)
#undef GRAPH_NO_GRADIENT
