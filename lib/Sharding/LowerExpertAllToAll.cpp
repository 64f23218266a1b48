//===- LowerExpertAllToAll.cpp - Expert parallelism's all-to-all dispatch -===//
//
// The partitioner gives an expert op split over mesh axes A (its `axes`)
// the all-gather form: every token operand all_gathered over A along
// dimension 0, an expert_matmul's result (partial over A: zeros where
// another rank holds the slot's expert) reduce-scattered back. Each rank
// then receives every rank's tokens, (|A| - 1) x its own, to use the few
// routed to its experts.
//
// This pass gives such an op this rank's own slots and dispatch =
// "all_to_all": the kernel sends each slot's row to the rank holding its
// expert, after an exchange of the counts, and an expert_matmul's products
// come back the same way. A rank sends its k rows per token (fewer where
// slots share a rank) and gets as many products back.
//
//===----------------------------------------------------------------------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

namespace trellis {
#define GEN_PASS_DEF_LOWEREXPERTALLTOALLPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

/// The value `gathered` is the all_gather of along dimension 0 over
/// exactly `axes`, or null.
Value gatheredTokens(Value gathered, ArrayAttr axes) {
  auto gather = gathered.getDefiningOp<AllGatherOp>();
  if (!gather || gather.getAxes() != axes || gather.getDim() != 0)
    return {};
  return gather.getInput();
}

/// The reduce_scatters (sum, dimension 0, over `axes`) that are the only
/// readers of `result`, or none if anything else reads it.
SmallVector<ReduceScatterOp> scattersOf(Value result, ArrayAttr axes) {
  SmallVector<ReduceScatterOp> scatters;
  for (Operation *user : result.getUsers()) {
    auto scatter = dyn_cast<ReduceScatterOp>(user);
    if (!scatter || scatter.getAxes() != axes || scatter.getDim() != 0 ||
        scatter.getKind() != ReductionKind::Sum)
      return {};
    scatters.push_back(scatter);
  }
  return scatters;
}

/// Erases `values`' defining all_gathers that nothing reads any more.
void eraseDeadGathers(ArrayRef<Value> values) {
  for (Value value : values)
    if (auto gather = value.getDefiningOp<AllGatherOp>())
      if (gather->use_empty())
        gather->erase();
}

/// expert_matmul(all_gather(x), w, all_gather(ids)) -> reduce_scatter
/// becomes expert_matmul(x, w, ids) {dispatch = "all_to_all"}.
bool lowerProduct(graph::ExpertMatmulOp op) {
  ArrayAttr axes = op.getAxesAttr();
  Value lhs = gatheredTokens(op.getLhs(), axes);
  Value experts = gatheredTokens(op.getExperts(), axes);
  SmallVector<ReduceScatterOp> scatters = scattersOf(op.getResult(), axes);
  if (!lhs || !experts || scatters.empty())
    return false;
  OpBuilder builder(op);
  auto local = graph::ExpertMatmulOp::create(
      builder, op.getLoc(), scatters.front().getType(), lhs, op.getWeight(),
      experts, op.getTransposeRhs(), axes, builder.getStringAttr("all_to_all"));
  local->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  for (ReduceScatterOp scatter : scatters) {
    scatter.getResult().replaceAllUsesWith(local.getResult());
    scatter->erase();
  }
  Value gatheredLhs = op.getLhs(), gatheredExperts = op.getExperts();
  op->erase();
  eraseDeadGathers({gatheredLhs, gatheredExperts});
  return true;
}

/// expert_matmul_weight_grad(all_gather(x), all_gather(dy),
/// all_gather(ids)) becomes the same op over x, dy and ids with dispatch =
/// "all_to_all" (its result, the rank's experts' gradients, is unchanged).
bool lowerWeightGradient(graph::ExpertMatmulWeightGradOp op) {
  ArrayAttr axes = op.getAxesAttr();
  Value lhs = gatheredTokens(op.getLhs(), axes);
  Value grad = gatheredTokens(op.getResultGrad(), axes);
  Value experts = gatheredTokens(op.getExperts(), axes);
  if (!lhs || !grad || !experts)
    return false;
  Value gatheredLhs = op.getLhs(), gatheredGrad = op.getResultGrad(),
        gatheredExperts = op.getExperts();
  op.getLhsMutable().assign(lhs);
  op.getResultGradMutable().assign(grad);
  op.getExpertsMutable().assign(experts);
  op.setDispatchAttr(OpBuilder(op).getStringAttr("all_to_all"));
  eraseDeadGathers({gatheredLhs, gatheredGrad, gatheredExperts});
  return true;
}

struct LowerExpertAllToAllPass
    : public trellis::impl::LowerExpertAllToAllPassBase<
          LowerExpertAllToAllPass> {
  void runOnOperation() override {
    SmallVector<Operation *> candidates;
    getOperation().walk([&](Operation *op) {
      if (isa<graph::ExpertMatmulOp, graph::ExpertMatmulWeightGradOp>(op) &&
          op->hasAttr("axes") && !op->hasAttr("dispatch"))
        candidates.push_back(op);
    });
    for (Operation *op : candidates) {
      if (auto product = dyn_cast<graph::ExpertMatmulOp>(op))
        (void)lowerProduct(product);
      else
        (void)lowerWeightGradient(cast<graph::ExpertMatmulWeightGradOp>(op));
    }
  }
};

} // namespace
