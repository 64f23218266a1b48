//===- GraphOps.cpp - Graph ops: result types from the op contract --------===//
//
// Each graph op is a plan op: its inferReturnTypes runs the op's contract
// (trellis/Common/OpContract.h), which is also its verifier. A malformed op
// fails to infer with the contract's diagnostic, stating expected and found
// values: the same text the runtime gives for a malformed plan instruction.
//
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"

#include <type_traits>

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

namespace {

/// The inherent attributes of an op being built or parsed, as a
/// dictionary (those not set yet are absent).
template <typename OpT, typename AdaptorT>
DictionaryAttr inherentAttributes(MLIRContext *context, AdaptorT &adaptor) {
  if constexpr (std::is_same_v<typename OpT::Properties, EmptyProperties>)
    return DictionaryAttr::get(context, {});
  else
    return llvm::dyn_cast_or_null<DictionaryAttr>(
        OpT::getPropertiesAsAttr(context, adaptor.getProperties()));
}

} // namespace

#define GRAPH_INFER_FROM_CONTRACT(OP)                                          \
  LogicalResult OP::inferReturnTypes(MLIRContext *context,                     \
                                     std::optional<Location> loc,              \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    return inferFromContract(planOpName(getOperationName().split('.').second), \
                             context, loc, adaptor.getOperands(),              \
                             inherentAttributes<OP>(context, adaptor),         \
                             adaptor.getAttributes(), types);                  \
  }
GRAPH_INFER_FROM_CONTRACT(FillOp)
GRAPH_INFER_FROM_CONTRACT(AddOp)
GRAPH_INFER_FROM_CONTRACT(SubOp)
GRAPH_INFER_FROM_CONTRACT(MulOp)
GRAPH_INFER_FROM_CONTRACT(DivOp)
GRAPH_INFER_FROM_CONTRACT(MaximumOp)
GRAPH_INFER_FROM_CONTRACT(EqualMaskOp)
GRAPH_INFER_FROM_CONTRACT(ScaleOp)
GRAPH_INFER_FROM_CONTRACT(CastOp)
GRAPH_INFER_FROM_CONTRACT(MicrobatchSumOp)
GRAPH_INFER_FROM_CONTRACT(NegOp)
GRAPH_INFER_FROM_CONTRACT(ExpOp)
GRAPH_INFER_FROM_CONTRACT(LogOp)
GRAPH_INFER_FROM_CONTRACT(TanhOp)
GRAPH_INFER_FROM_CONTRACT(SqrtOp)
GRAPH_INFER_FROM_CONTRACT(RsqrtOp)
GRAPH_INFER_FROM_CONTRACT(SigmoidOp)
GRAPH_INFER_FROM_CONTRACT(SiluOp)
GRAPH_INFER_FROM_CONTRACT(GeluOp)
GRAPH_INFER_FROM_CONTRACT(GeluTanhOp)
GRAPH_INFER_FROM_CONTRACT(ReluOp)
GRAPH_INFER_FROM_CONTRACT(UnaryGradOp)
GRAPH_INFER_FROM_CONTRACT(ReduceSumOp)
GRAPH_INFER_FROM_CONTRACT(ReduceMeanOp)
GRAPH_INFER_FROM_CONTRACT(ReduceMaxOp)
GRAPH_INFER_FROM_CONTRACT(BroadcastToOp)
GRAPH_INFER_FROM_CONTRACT(ReshapeOp)
GRAPH_INFER_FROM_CONTRACT(TransposeOp)
GRAPH_INFER_FROM_CONTRACT(SliceOp)
GRAPH_INFER_FROM_CONTRACT(PadOp)
GRAPH_INFER_FROM_CONTRACT(ConcatOp)
GRAPH_INFER_FROM_CONTRACT(MatmulOp)
GRAPH_INFER_FROM_CONTRACT(SoftmaxOp)
GRAPH_INFER_FROM_CONTRACT(SoftmaxGradOp)
GRAPH_INFER_FROM_CONTRACT(LayerNormOp)
GRAPH_INFER_FROM_CONTRACT(LayerNormGradOp)
GRAPH_INFER_FROM_CONTRACT(RmsNormOp)
GRAPH_INFER_FROM_CONTRACT(RmsNormGradOp)
GRAPH_INFER_FROM_CONTRACT(EmbeddingOp)
GRAPH_INFER_FROM_CONTRACT(EmbeddingGradOp)
GRAPH_INFER_FROM_CONTRACT(RopeOp)
GRAPH_INFER_FROM_CONTRACT(AttentionOp)
GRAPH_INFER_FROM_CONTRACT(AttentionGradOp)
GRAPH_INFER_FROM_CONTRACT(AttentionBlockOp)
GRAPH_INFER_FROM_CONTRACT(AttentionMergeOp)
GRAPH_INFER_FROM_CONTRACT(AttentionBlockGradOp)
GRAPH_INFER_FROM_CONTRACT(PositionsOp)
GRAPH_INFER_FROM_CONTRACT(FusedElementwiseOp)
GRAPH_INFER_FROM_CONTRACT(CrossEntropyOp)
GRAPH_INFER_FROM_CONTRACT(CrossEntropyGradOp)
GRAPH_INFER_FROM_CONTRACT(AdamWOp)
GRAPH_INFER_FROM_CONTRACT(SgdOp)
#undef GRAPH_INFER_FROM_CONTRACT

//===----------------------------------------------------------------------===//
// Precision policies (PrecisionOpInterface) other than the default, Low
//===----------------------------------------------------------------------===//

PrecisionPolicy CastOp::getPrecisionPolicy() {
  return PrecisionPolicy::Operands;
}

// The loss and its gradient in fp32, from logits of any float dtype.
PrecisionPolicy CrossEntropyOp::getPrecisionPolicy() {
  return PrecisionPolicy::Float32;
}

PrecisionPolicy CrossEntropyGradOp::getPrecisionPolicy() {
  return PrecisionPolicy::Float32;
}
