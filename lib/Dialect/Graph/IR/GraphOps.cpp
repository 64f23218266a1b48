//===- GraphOps.cpp - Graph ops: result type inference and verification ---===//
//
// Each op's inferReturnTypes is also its verifier: a malformed op fails to
// infer, with a diagnostic stating expected and found values.
//
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace trellis::graph;

#include "trellis/Dialect/Graph/IR/GraphEnums.cpp.inc"
#include "trellis/Dialect/Graph/IR/GraphInterfaces.cpp.inc"
#include "trellis/Dialect/Graph/IR/GraphOpsDialect.cpp.inc"

void GraphDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "trellis/Dialect/Graph/IR/GraphOps.cpp.inc"
      >();
  registerAttributes();
}

#define GET_OP_CLASSES
#include "trellis/Dialect/Graph/IR/GraphOps.cpp.inc"

std::optional<SmallVector<int64_t>>
trellis::graph::broadcastShapes(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  SmallVector<int64_t> shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l != r && l != 1 && r != 1)
      return std::nullopt;
    shape[i] = l == 1 ? r : l;
  }
  return shape;
}

namespace {

/// `[8, 16]`, for diagnostics.
std::string formatShape(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (auto [i, size] : llvm::enumerate(shape))
    text += (i ? ", " : "") + std::to_string(size);
  return text + "]";
}

ArrayRef<int64_t> shapeOf(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getShape();
}

RankedTensorType tensorLike(Value value, ArrayRef<int64_t> shape) {
  return llvm::cast<RankedTensorType>(value.getType()).clone(shape);
}

RankedTensorType f32Tensor(MLIRContext *context, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, Float32Type::get(context));
}

/// Checks that `value` is 1-D with `size` elements.
LogicalResult verifyVector(std::optional<Location> loc, StringRef name,
                           Value value, int64_t size) {
  ArrayRef<int64_t> shape = shapeOf(value);
  if (shape.size() == 1 && shape[0] == size)
    return success();
  return emitOptionalError(loc, "expected ", name, " of shape [", size,
                           "] (the last dimension of the input), found ",
                           formatShape(shape));
}

LogicalResult verifySameShape(std::optional<Location> loc, StringRef name,
                              Value value, StringRef referenceName,
                              Value reference) {
  if (shapeOf(value) == shapeOf(reference))
    return success();
  return emitOptionalError(loc, "expected ", name, " to have the shape of ",
                           referenceName, " ", formatShape(shapeOf(reference)),
                           ", found ", formatShape(shapeOf(value)));
}

LogicalResult verifyRank(std::optional<Location> loc, StringRef name,
                         Value value, int64_t rank) {
  if (static_cast<int64_t>(shapeOf(value).size()) == rank)
    return success();
  return emitOptionalError(loc, "expected ", name, " of rank ", rank,
                           ", found shape ", formatShape(shapeOf(value)));
}

LogicalResult verifyPositive(Operation *op, StringRef name, double value) {
  if (value > 0)
    return success();
  return op->emitOpError() << "expected " << name << " > 0, found " << value;
}

/// Inference runs before attributes written in an attribute dictionary are
/// stored (the parser infers first), and on generic forms that may lack
/// them: every attribute it reads is checked for presence.
#define REQUIRE_ATTRIBUTE(attr, name)                                          \
  do {                                                                         \
    if (!(attr))                                                               \
      return emitOptionalError(loc, "expected attribute '" name "'");          \
  } while (false)

} // namespace

//===----------------------------------------------------------------------===//
// Constants and elementwise ops
//===----------------------------------------------------------------------===//

LogicalResult FillOp::inferReturnTypes(MLIRContext *context,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getShapeAttr(), "shape");
  for (int64_t size : adaptor.getShape())
    if (size < 0)
      return emitOptionalError(loc, "expected sizes >= 0, found ",
                               formatShape(adaptor.getShape()));
  types.push_back(f32Tensor(context, adaptor.getShape()));
  return success();
}

namespace {
LogicalResult inferBinary(std::optional<Location> loc, Value lhs, Value rhs,
                          SmallVectorImpl<Type> &types) {
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(shapeOf(lhs), shapeOf(rhs));
  if (!shape)
    return emitOptionalError(loc, "operands of shapes ",
                             formatShape(shapeOf(lhs)), " and ",
                             formatShape(shapeOf(rhs)), " do not broadcast");
  types.push_back(tensorLike(lhs, *shape));
  return success();
}
} // namespace

#define GRAPH_INFER_BINARY(OP)                                                 \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &types) {                                          \
    return inferBinary(loc, adaptor.getLhs(), adaptor.getRhs(), types);        \
  }
GRAPH_INFER_BINARY(AddOp)
GRAPH_INFER_BINARY(SubOp)
GRAPH_INFER_BINARY(MulOp)
GRAPH_INFER_BINARY(DivOp)
GRAPH_INFER_BINARY(MaximumOp)
GRAPH_INFER_BINARY(EqualMaskOp)
#undef GRAPH_INFER_BINARY

#define GRAPH_INFER_SAME_AS_INPUT(OP)                                          \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location>,   \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    types.push_back(adaptor.getInput().getType());                             \
    return success();                                                          \
  }
GRAPH_INFER_SAME_AS_INPUT(ScaleOp)
GRAPH_INFER_SAME_AS_INPUT(MicrobatchSumOp)
GRAPH_INFER_SAME_AS_INPUT(NegOp)
GRAPH_INFER_SAME_AS_INPUT(ExpOp)
GRAPH_INFER_SAME_AS_INPUT(LogOp)
GRAPH_INFER_SAME_AS_INPUT(TanhOp)
GRAPH_INFER_SAME_AS_INPUT(SqrtOp)
GRAPH_INFER_SAME_AS_INPUT(RsqrtOp)
GRAPH_INFER_SAME_AS_INPUT(SigmoidOp)
GRAPH_INFER_SAME_AS_INPUT(SiluOp)
GRAPH_INFER_SAME_AS_INPUT(GeluOp)
GRAPH_INFER_SAME_AS_INPUT(GeluTanhOp)
GRAPH_INFER_SAME_AS_INPUT(ReluOp)
GRAPH_INFER_SAME_AS_INPUT(SoftmaxOp)
#undef GRAPH_INFER_SAME_AS_INPUT

LogicalResult UnaryGradOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  if (failed(verifySameShape(loc, "result_grad", adaptor.getResultGrad(),
                             "input", adaptor.getInput())))
    return failure();
  types.push_back(adaptor.getInput().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and broadcasting
//===----------------------------------------------------------------------===//

namespace {
LogicalResult inferReduce(std::optional<Location> loc, Value input,
                          ArrayRef<int64_t> dims, bool keepDims,
                          SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> shape = shapeOf(input);
  int64_t rank = shape.size();
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim < 0 || dim >= rank)
      return emitOptionalError(loc, "expected reduced dimensions in [0, ", rank,
                               "), found ", dim);
    if (i > 0 && dims[i - 1] >= dim)
      return emitOptionalError(
          loc, "expected strictly increasing dimensions, found ",
          formatShape(dims));
  }
  SmallVector<int64_t> result;
  for (int64_t d = 0; d < rank; ++d) {
    if (!llvm::is_contained(dims, d))
      result.push_back(shape[d]);
    else if (keepDims)
      result.push_back(1);
  }
  types.push_back(tensorLike(input, result));
  return success();
}
} // namespace

#define GRAPH_INFER_REDUCE(OP)                                                 \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &types) {                                          \
    REQUIRE_ATTRIBUTE(adaptor.getDimsAttr(), "dims");                          \
    return inferReduce(loc, adaptor.getInput(), adaptor.getDims(),             \
                       adaptor.getKeepDims(), types);                          \
  }
GRAPH_INFER_REDUCE(ReduceSumOp)
GRAPH_INFER_REDUCE(ReduceMeanOp)
GRAPH_INFER_REDUCE(ReduceMaxOp)
#undef GRAPH_INFER_REDUCE

LogicalResult BroadcastToOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getShapeAttr(), "shape");
  ArrayRef<int64_t> target = adaptor.getShape();
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(shapeOf(adaptor.getInput()), target);
  if (!shape || ArrayRef<int64_t>(*shape) != target)
    return emitOptionalError(loc, "cannot broadcast shape ",
                             formatShape(shapeOf(adaptor.getInput())), " to ",
                             formatShape(target));
  types.push_back(tensorLike(adaptor.getInput(), target));
  return success();
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getShapeAttr(), "shape");
  ArrayRef<int64_t> from = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> to = adaptor.getShape();
  if (llvm::any_of(to, [](int64_t size) { return size < 0; }) ||
      ShapedType::getNumElements(from) != ShapedType::getNumElements(to))
    return emitOptionalError(loc, "cannot reshape ", formatShape(from), " (",
                             ShapedType::getNumElements(from), " elements) to ",
                             formatShape(to));
  types.push_back(tensorLike(adaptor.getInput(), to));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getPermutationAttr(), "permutation");
  ArrayRef<int64_t> shape = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  SmallVector<bool> seen(shape.size(), false);
  bool valid = perm.size() == shape.size();
  for (int64_t d : perm) {
    if (!valid || d < 0 || d >= static_cast<int64_t>(shape.size()) || seen[d]) {
      valid = false;
      break;
    }
    seen[d] = true;
  }
  if (!valid)
    return emitOptionalError(loc, "expected a permutation of ", shape.size(),
                             " dimensions, found ", formatShape(perm));
  SmallVector<int64_t> result;
  for (int64_t d : perm)
    result.push_back(shape[d]);
  types.push_back(tensorLike(adaptor.getInput(), result));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getOffsetsAttr(), "offsets");
  REQUIRE_ATTRIBUTE(adaptor.getSizesAttr(), "sizes");
  ArrayRef<int64_t> shape = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> offsets = adaptor.getOffsets(), sizes = adaptor.getSizes();
  if (offsets.size() != shape.size() || sizes.size() != shape.size())
    return emitOptionalError(loc, "expected ", shape.size(),
                             " offsets and sizes, found ", offsets.size(),
                             " and ", sizes.size());
  for (size_t d = 0; d < shape.size(); ++d)
    if (offsets[d] < 0 || sizes[d] < 0 || offsets[d] + sizes[d] > shape[d])
      return emitOptionalError(loc, "slice [", offsets[d], ", ",
                               offsets[d] + sizes[d], ") of dimension ", d,
                               " is outside [0, ", shape[d], ")");
  types.push_back(tensorLike(adaptor.getInput(), sizes));
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getLowAttr(), "low");
  REQUIRE_ATTRIBUTE(adaptor.getHighAttr(), "high");
  ArrayRef<int64_t> shape = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> low = adaptor.getLow(), high = adaptor.getHigh();
  if (low.size() != shape.size() || high.size() != shape.size())
    return emitOptionalError(loc, "expected ", shape.size(),
                             " low and high paddings, found ", low.size(),
                             " and ", high.size());
  SmallVector<int64_t> result;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (low[d] < 0 || high[d] < 0)
      return emitOptionalError(loc, "expected paddings >= 0, found low ",
                               formatShape(low), " high ", formatShape(high));
    result.push_back(low[d] + shape[d] + high[d]);
  }
  types.push_back(tensorLike(adaptor.getInput(), result));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getDimAttr(), "dim");
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "expected at least one input, found none");
  SmallVector<int64_t> result(shapeOf(inputs[0]));
  int64_t dim = adaptor.getDim();
  if (dim < 0 || dim >= static_cast<int64_t>(result.size()))
    return emitOptionalError(loc, "expected dim in [0, ", result.size(),
                             "), found ", dim);
  for (Value input : inputs.drop_front()) {
    ArrayRef<int64_t> shape = shapeOf(input);
    bool compatible = shape.size() == result.size();
    for (size_t d = 0; compatible && d < shape.size(); ++d)
      compatible = static_cast<int64_t>(d) == dim || shape[d] == result[d];
    if (!compatible)
      return emitOptionalError(loc, "cannot concatenate ",
                               formatShape(shapeOf(inputs[0])), " and ",
                               formatShape(shape), " along dimension ", dim);
    result[dim] += shape[dim];
  }
  types.push_back(tensorLike(inputs[0], result));
  return success();
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> lhs = shapeOf(adaptor.getLhs());
  ArrayRef<int64_t> rhs = shapeOf(adaptor.getRhs());
  if (lhs.size() < 2 || rhs.size() < 2)
    return emitOptionalError(loc, "expected operands of rank >= 2, found ",
                             formatShape(lhs), " and ", formatShape(rhs));
  if (rhs.size() != 2 && rhs.size() != lhs.size())
    return emitOptionalError(loc, "expected rhs of rank 2 or ", lhs.size(),
                             " (the rank of lhs), found ", formatShape(rhs));
  ArrayRef<int64_t> batch = lhs.drop_back(2);
  if (rhs.size() != 2 && rhs.drop_back(2) != batch)
    return emitOptionalError(loc, "expected rhs batch dimensions ",
                             formatShape(batch), ", found ",
                             formatShape(rhs.drop_back(2)));
  bool transposeLhs = adaptor.getTransposeLhs();
  bool transposeRhs = adaptor.getTransposeRhs();
  int64_t m = lhs[lhs.size() - (transposeLhs ? 1 : 2)];
  int64_t k = lhs[lhs.size() - (transposeLhs ? 2 : 1)];
  int64_t rhsK = rhs[rhs.size() - (transposeRhs ? 1 : 2)];
  int64_t n = rhs[rhs.size() - (transposeRhs ? 2 : 1)];
  if (k != rhsK)
    return emitOptionalError(loc, "contracting sizes differ: lhs ",
                             formatShape(lhs), " has ", k, ", rhs ",
                             formatShape(rhs), " has ", rhsK);
  SmallVector<int64_t> result(batch);
  result.append({m, n});
  types.push_back(tensorLike(adaptor.getLhs(), result));
  return success();
}

//===----------------------------------------------------------------------===//
// Neural-network layers
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  if (failed(verifySameShape(loc, "result_grad", adaptor.getResultGrad(),
                             "result_value", adaptor.getResultValue())))
    return failure();
  types.push_back(adaptor.getResultValue().getType());
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  int64_t features = shapeOf(adaptor.getInput()).back();
  if (failed(verifyVector(loc, "weight", adaptor.getWeight(), features)) ||
      failed(verifyVector(loc, "bias", adaptor.getBias(), features)))
    return failure();
  types.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  int64_t features = shapeOf(adaptor.getInput()).back();
  if (failed(verifyVector(loc, "weight", adaptor.getWeight(), features)) ||
      failed(verifySameShape(loc, "result_grad", adaptor.getResultGrad(),
                             "input", adaptor.getInput())))
    return failure();
  types.append({adaptor.getInput().getType(), adaptor.getWeight().getType(),
                adaptor.getWeight().getType()});
  return success();
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  int64_t features = shapeOf(adaptor.getInput()).back();
  if (failed(verifyVector(loc, "weight", adaptor.getWeight(), features)))
    return failure();
  types.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  int64_t features = shapeOf(adaptor.getInput()).back();
  if (failed(verifyVector(loc, "weight", adaptor.getWeight(), features)) ||
      failed(verifySameShape(loc, "result_grad", adaptor.getResultGrad(),
                             "input", adaptor.getInput())))
    return failure();
  types.append({adaptor.getInput().getType(), adaptor.getWeight().getType()});
  return success();
}

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  if (failed(verifyRank(loc, "table", adaptor.getTable(), 2)))
    return failure();
  SmallVector<int64_t> shape(shapeOf(adaptor.getIds()));
  shape.push_back(shapeOf(adaptor.getTable())[1]);
  types.push_back(tensorLike(adaptor.getTable(), shape));
  return success();
}

LogicalResult EmbeddingGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getNumEmbeddingsAttr(), "num_embeddings");
  ArrayRef<int64_t> ids = shapeOf(adaptor.getIds());
  ArrayRef<int64_t> grad = shapeOf(adaptor.getResultGrad());
  if (grad.size() != ids.size() + 1 || grad.drop_back() != ids)
    return emitOptionalError(loc, "expected result_grad of shape ids ",
                             formatShape(ids), " + [features], found ",
                             formatShape(grad));
  if (adaptor.getNumEmbeddings() < 1)
    return emitOptionalError(loc, "expected rows >= 1, found ",
                             adaptor.getNumEmbeddings());
  types.push_back(tensorLike(
      adaptor.getResultGrad(),
      {static_cast<int64_t>(adaptor.getNumEmbeddings()), grad.back()}));
  return success();
}

LogicalResult RopeOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  REQUIRE_ATTRIBUTE(adaptor.getFrequenciesAttr(), "frequencies");
  if (failed(verifyRank(loc, "input [batch, seq, heads, dim]",
                        adaptor.getInput(), 4)))
    return failure();
  int64_t dim = shapeOf(adaptor.getInput()).back();
  if (dim % 2 != 0)
    return emitOptionalError(loc, "expected an even head dimension, found ",
                             dim);
  if (static_cast<int64_t>(adaptor.getFrequencies().size()) != dim / 2)
    return emitOptionalError(loc, "expected ", dim / 2,
                             " frequencies (half the head dimension), found ",
                             adaptor.getFrequencies().size());
  types.push_back(adaptor.getInput().getType());
  return success();
}

namespace {
LogicalResult verifyAttentionOperands(std::optional<Location> loc, Value query,
                                      Value key, Value value) {
  if (failed(verifyRank(loc, "query [batch, seq, heads, dim]", query, 4)) ||
      failed(verifyRank(loc, "key [batch, seq, kv_heads, dim]", key, 4)) ||
      failed(verifySameShape(loc, "value", value, "key", key)))
    return failure();
  ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key);
  if (q[0] != k[0] || q[1] != k[1] || q[3] != k[3])
    return emitOptionalError(loc, "expected key of shape [", q[0], ", ", q[1],
                             ", kv_heads, ", q[3], "] to match query ",
                             formatShape(q), ", found ", formatShape(k));
  if (k[2] == 0 || q[2] % k[2] != 0)
    return emitOptionalError(loc, "expected kv heads (", k[2],
                             ") to divide query heads (", q[2], ")");
  return success();
}
} // namespace

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  if (failed(verifyAttentionOperands(loc, adaptor.getQuery(), adaptor.getKey(),
                                     adaptor.getValue())))
    return failure();
  types.push_back(adaptor.getQuery().getType());
  return success();
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  if (failed(verifyAttentionOperands(loc, adaptor.getQuery(), adaptor.getKey(),
                                     adaptor.getValue())) ||
      failed(verifySameShape(loc, "result_grad", adaptor.getResultGrad(),
                             "query", adaptor.getQuery())))
    return failure();
  types.append({adaptor.getQuery().getType(), adaptor.getKey().getType(),
                adaptor.getValue().getType()});
  return success();
}

namespace {
LogicalResult verifyTargets(std::optional<Location> loc, Value logits,
                            Value targets) {
  ArrayRef<int64_t> l = shapeOf(logits), t = shapeOf(targets);
  if (l.empty() || l.drop_back() != t)
    return emitOptionalError(
        loc, "expected targets of shape ",
        formatShape(l.empty() ? l : l.drop_back()), " (logits ", formatShape(l),
        " without the class dimension), found ", formatShape(t));
  return success();
}
} // namespace

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *context,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  if (failed(verifyTargets(loc, adaptor.getLogits(), adaptor.getTargets())))
    return failure();
  types.push_back(f32Tensor(context, {}));
  return success();
}

LogicalResult
CrossEntropyGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                     Adaptor adaptor,
                                     SmallVectorImpl<Type> &types) {
  if (failed(verifyTargets(loc, adaptor.getLogits(), adaptor.getTargets())))
    return failure();
  types.push_back(adaptor.getLogits().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

LogicalResult AdamWOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Value param = adaptor.getParam();
  if (failed(verifySameShape(loc, "grad", adaptor.getGrad(), "param", param)) ||
      failed(verifySameShape(loc, "first_moment", adaptor.getFirstMoment(),
                             "param", param)) ||
      failed(verifySameShape(loc, "second_moment", adaptor.getSecondMoment(),
                             "param", param)))
    return failure();
  types.append(3, param.getType());
  return success();
}

LogicalResult SgdOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  if (failed(verifySameShape(loc, "grad", adaptor.getGrad(), "param",
                             adaptor.getParam())))
    return failure();
  types.push_back(adaptor.getParam().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Attribute verifiers (run once the op exists)
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  return verifyPositive(*this, "epsilon", getEpsilon().convertToDouble());
}

LogicalResult RmsNormOp::verify() {
  return verifyPositive(*this, "epsilon", getEpsilon().convertToDouble());
}

LogicalResult AdamWOp::verify() {
  double beta1 = getBeta1().convertToDouble();
  double beta2 = getBeta2().convertToDouble();
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1)
    return emitOpError() << "expected betas in [0, 1), found " << beta1
                         << " and " << beta2;
  return verifyPositive(*this, "epsilon", getEpsilon().convertToDouble());
}
