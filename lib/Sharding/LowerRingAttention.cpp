//===- LowerRingAttention.cpp - Attention over gathered blocks as a ring --===//
//
// The partitioner gives attention over a sequence split along mesh axes A
// the all-gather form: keys and values all_gathered over A, the key and
// value gradients reduce-scattered back. This pass replaces that form by a
// ring (Liu et al., 2023): no rank ever holds more than its own block and
// the one in transit.
//
// Forward, N = |A| steps: step i attends to the block of the rank i places
// before (attention_block shift i); the block moves on with a
// collective_permute issued before the step's compute, so that the
// transfer overlaps it (the runtime waits for a collective at its first
// reader); attention_merge folds the steps by log-sum-exp.
//
// Backward, N steps: attention_block_grad gives the step's block its
// contributions; the key and value gradients ride with their block (added
// to on every rank it visits) and one last permute brings them home. The
// query gradient is summed in place, in ring order.
//
// ALiBi's slopes go to every block (each knows its positions); attention
// sinks join the softmax once, in the step-0 block (the rank's own keys),
// whose backward gives their gradient.
//
//===----------------------------------------------------------------------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace trellis {
#define GEN_PASS_DEF_LOWERRINGATTENTIONPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

/// An attention (or its gradient) in the all-gather form: queries split
/// over `axes`, keys and values gathered from this rank's blocks.
struct GatheredAttention {
  Value query, key, value, slopes, sinks;
  FlatSymbolRefAttr mesh;
  ArrayAttr axes;
  int64_t ranks = 1;
};

/// The local block `gathered` is the all_gather of along the sequence over
/// `axes`, or null.
Value gatheredBlock(Value gathered, ArrayAttr axes,
                    FlatSymbolRefAttr &mesh) {
  auto gather = gathered.getDefiningOp<AllGatherOp>();
  if (!gather || gather.getAxes() != axes || gather.getDim() != 1)
    return {};
  mesh = gather.getMeshAttr();
  return gather.getInput();
}

std::optional<GatheredAttention> matchGathered(Operation *op, Value query,
                                               Value key, Value value,
                                               Value slopes, Value sinks) {
  auto axes = op->getAttrOfType<ArrayAttr>("axes");
  if (!axes || axes.empty())
    return std::nullopt;
  GatheredAttention match{query, {}, {}, slopes, sinks, {}, axes};
  FlatSymbolRefAttr valueMesh;
  match.key = gatheredBlock(key, axes, match.mesh);
  match.value = gatheredBlock(value, axes, valueMesh);
  if (!match.key || !match.value || match.mesh != valueMesh)
    return std::nullopt;
  match.ranks = groupSizeOf(key.getDefiningOp());
  return match;
}

/// The forward ring's result and log-sum-exp.
struct RingResult {
  Value result, logSumExp;
};

class RingBuilder {
public:
  RingBuilder(Operation *anchor, const GatheredAttention &match)
      : builder_(anchor), loc_(anchor->getLoc()), match_(match) {
    for (StringRef name :
         {graph::GraphDialect::kPhaseAttrName, graph::GraphDialect::kPartAttrName})
      if (Attribute attr = anchor->getAttr(name))
        marks_.push_back(builder_.getNamedAttr(name, attr));
    scale_ = anchor->getAttrOfType<FloatAttr>("scale");
    causal_ = anchor->getAttrOfType<BoolAttr>("causal");
    if (!causal_)
      causal_ = builder_.getBoolAttr(true);
    chunks_ = anchor->getAttrOfType<IntegerAttr>("chunks");
    window_ = anchor->getAttrOfType<IntegerAttr>("window");
    softcap_ = anchor->getAttrOfType<FloatAttr>("softcap");
  }

  RingResult forward() {
    Value key = match_.key, value = match_.value;
    RingResult ring;
    for (int64_t step = 0; step < match_.ranks; ++step) {
      auto [nextKey, nextValue] = passOn(step, key, value);
      auto block = mark(graph::AttentionBlockOp::create(
          builder_, loc_, match_.query, key, value, match_.slopes,
          step == 0 ? match_.sinks : Value(), scale_, causal_, match_.axes,
          builder_.getI64IntegerAttr(step), chunks_, window_, softcap_));
      if (step == 0) {
        ring = {block.getResult(), block.getLogSumExp()};
      } else {
        auto merged = mark(graph::AttentionMergeOp::create(
            builder_, loc_, ring.result, ring.logSumExp, block.getResult(),
            block.getLogSumExp()));
        ring = {merged.getMerged(), merged.getMergedLogSumExp()};
      }
      key = nextKey;
      value = nextValue;
    }
    return ring;
  }

  /// The query gradient, this rank's key and value gradients, and the
  /// sinks' (null without sinks).
  std::tuple<Value, Value, Value, Value> backward(const RingResult &forward,
                                                  Value resultGrad) {
    Value key = match_.key, value = match_.value;
    Value queryGrad, keyGrad, valueGrad, sinksGrad;
    for (int64_t step = 0; step < match_.ranks; ++step) {
      auto [nextKey, nextValue] = passOn(step, key, value);
      // The gradients of the block arriving now, summed on the ranks it
      // visited before.
      Value arrivedKeyGrad, arrivedValueGrad;
      if (step > 0) {
        arrivedKeyGrad = permute(keyGrad);
        arrivedValueGrad = permute(valueGrad);
      }
      auto block = mark(graph::AttentionBlockGradOp::create(
          builder_, loc_, match_.query, key, value, forward.result,
          forward.logSumExp, resultGrad, match_.slopes,
          step == 0 ? match_.sinks : Value(), scale_, causal_, match_.axes,
          builder_.getI64IntegerAttr(step), chunks_, window_, softcap_));
      if (step == 0) {
        sinksGrad = block.getSinksGrad();
        queryGrad = block.getQueryGrad();
        keyGrad = block.getKeyGrad();
        valueGrad = block.getValueGrad();
      } else {
        queryGrad = add(queryGrad, block.getQueryGrad());
        keyGrad = add(arrivedKeyGrad, block.getKeyGrad());
        valueGrad = add(arrivedValueGrad, block.getValueGrad());
      }
      key = nextKey;
      value = nextValue;
    }
    // After the last step each rank holds the gradients of the next
    // rank's block: one more hop takes them home.
    if (match_.ranks > 1) {
      keyGrad = permute(keyGrad);
      valueGrad = permute(valueGrad);
    }
    return {queryGrad, keyGrad, valueGrad, sinksGrad};
  }

private:
  template <typename OpT> OpT mark(OpT op) {
    for (NamedAttribute attr : marks_)
      op->setAttr(attr.getName(), attr.getValue());
    return op;
  }

  Value permute(Value input) {
    return mark(CollectivePermuteOp::create(builder_, loc_, input.getType(),
                                            input, match_.mesh, match_.axes,
                                            builder_.getI64IntegerAttr(1)))
        .getResult();
  }

  Value add(Value lhs, Value rhs) {
    return mark(graph::AddOp::create(builder_, loc_, lhs, rhs)).getResult();
  }

  /// The blocks the next step reads, sent on before this step computes
  /// (none after the last step).
  std::pair<Value, Value> passOn(int64_t step, Value key, Value value) {
    if (step + 1 >= match_.ranks)
      return {Value(), Value()};
    Value nextKey = permute(key);
    return {nextKey, value == key ? nextKey : permute(value)};
  }

  OpBuilder builder_;
  Location loc_;
  const GatheredAttention &match_;
  SmallVector<NamedAttribute> marks_;
  FloatAttr scale_;
  BoolAttr causal_;
  IntegerAttr chunks_, window_;
  FloatAttr softcap_;
};

/// The reduce_scatters of `grad` back to this rank's block (every user of
/// `grad` must be one), or failure naming the user that is not.
FailureOr<SmallVector<ReduceScatterOp>>
scattersHome(Operation *op, Value grad, const GatheredAttention &match,
             StringRef what) {
  SmallVector<ReduceScatterOp> scatters;
  for (Operation *user : grad.getUsers()) {
    auto scatter = llvm::dyn_cast<ReduceScatterOp>(user);
    if (!scatter || scatter.getAxes() != match.axes || scatter.getDim() != 1 ||
        scatter.getKind() != ReductionKind::Sum) {
      InFlightDiagnostic diagnostic = op->emitOpError()
                                      << "ring attention returns the " << what
                                      << " gradient to its block's rank: "
                                         "expected it reduce-scattered (sum) "
                                         "along the sequence over "
                                      << match.axes << ", found a use by ";
      diagnostic << user->getName();
      return diagnostic;
    }
    scatters.push_back(scatter);
  }
  return scatters;
}

struct LowerRingAttentionPass
    : public trellis::impl::LowerRingAttentionPassBase<LowerRingAttentionPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    // (query, gathered keys, gathered values) of each lowered attention.
    llvm::DenseMap<std::tuple<Value, Value, Value>, RingResult> rings;
    SmallVector<Operation *> dead;
    SmallVector<graph::AttentionOp> attentions;
    function.walk([&](graph::AttentionOp op) { attentions.push_back(op); });
    for (graph::AttentionOp op : attentions) {
      std::optional<GatheredAttention> match =
          matchGathered(op, op.getQuery(), op.getKey(), op.getValue(),
                        op.getSlopes(), op.getSinks());
      if (!match)
        continue;
      RingResult ring = RingBuilder(op, *match).forward();
      rings[{op.getQuery(), op.getKey(), op.getValue()}] = ring;
      op.getResult().replaceAllUsesWith(ring.result);
      dead.push_back(op);
    }

    SmallVector<graph::AttentionGradOp> gradients;
    function.walk([&](graph::AttentionGradOp op) { gradients.push_back(op); });
    for (graph::AttentionGradOp op : gradients) {
      std::optional<GatheredAttention> match =
          matchGathered(op, op.getQuery(), op.getKey(), op.getValue(),
                        op.getSlopes(), op.getSinks());
      if (!match)
        continue;
      FailureOr<SmallVector<ReduceScatterOp>> keyScatters =
          scattersHome(op, op.getKeyGrad(), *match, "key");
      FailureOr<SmallVector<ReduceScatterOp>> valueScatters =
          scattersHome(op, op.getValueGrad(), *match, "value");
      if (failed(keyScatters) || failed(valueScatters))
        return signalPassFailure();
      RingBuilder builder(op, *match);
      auto found = rings.find({op.getQuery(), op.getKey(), op.getValue()});
      RingResult forward =
          found != rings.end() ? found->second : builder.forward();
      auto [queryGrad, keyGrad, valueGrad, sinksGrad] =
          builder.backward(forward, op.getResultGrad());
      op.getQueryGrad().replaceAllUsesWith(queryGrad);
      if (Value grad = op.getSinksGrad())
        grad.replaceAllUsesWith(sinksGrad);
      // Erased in reverse: the scatters before the op they read.
      dead.push_back(op);
      for (ReduceScatterOp scatter : *keyScatters) {
        scatter.getResult().replaceAllUsesWith(keyGrad);
        dead.push_back(scatter);
      }
      for (ReduceScatterOp scatter : *valueScatters) {
        scatter.getResult().replaceAllUsesWith(valueGrad);
        dead.push_back(scatter);
      }
    }

    // The lowered ops, then the gathers nothing reads any more.
    SmallVector<AllGatherOp> gathers;
    for (Operation *op : dead) {
      for (Value operand : op->getOperands())
        if (auto gather = operand.getDefiningOp<AllGatherOp>())
          gathers.push_back(gather);
    }
    for (Operation *op : llvm::reverse(dead))
      op->erase();
    llvm::DenseSet<Operation *> seen;
    for (AllGatherOp gather : gathers)
      if (seen.insert(gather).second && gather->use_empty())
        gather->erase();
  }
};

} // namespace
