//===- ApplyContextParallel.cpp - Context parallelism as annotations ------===//
//
// All-gather attention (Llama 3's): each attention's keys and values are
// constrained whole along the sequence, its queries stay the rank's piece
// (attention then attends from the piece's place; the key and value
// gradients come out partial and are reduce-scattered home).
//
// DeepSpeed-Ulysses (Jacobs et al., 2023) as layout constraints: the
// activations are split along the sequence over the "cp" axis (the preset
// splits the inputs so), and the ops that need the whole sequence (rotary
// embeddings, attention) read their [batch, seq, heads, head_dim] operands
// split by heads over cp instead. The partitioner derives the all_to_alls:
// sequence pieces into head pieces before, and back after (where the
// sequence-split stream meets the attention output).
//
// Ring attention (Liu et al., 2023): the all-gather layout, with the key and
// value gradients split along the sequence where they are made, which
// -trellis-lower-ring-attention turns into a ring. Its causal balance
// stores the sequence in zigzag order (trellis/Common/SequenceChunks.h):
// the token inputs and the position-aware ops say so.
//
//===----------------------------------------------------------------------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "llvm/ADT/DenseSet.h"

namespace trellis {
#define GEN_PASS_DEF_APPLYCONTEXTPARALLELPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

struct ApplyContextParallelPass
    : public trellis::impl::ApplyContextParallelPassBase<
          ApplyContextParallelPass> {
  using ApplyContextParallelPassBase::ApplyContextParallelPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto function = module.lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      module.emitError() << "expected a training step @" << functionName
                         << " to split along the sequence, found none";
      return signalPassFailure();
    }
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    if (mesh) {
      mesh_ = mesh.getMesh();
      context_ = mesh_.getAxesWithRole(AxisRole::Context);
      tensor_ = mesh_.getAxesWithRole(AxisRole::Tensor);
      batch_ = mesh_.getBatchAxes();
    }
    if (sizeOf(context_) <= 1) {
      // The context axis, or the name the presets give it.
      std::string name = context_.empty() ? "cp" : context_.front().str();
      function.emitError()
          << "context parallelism splits the sequence over the \"" << name
          << "\" axis: expected " << name << " > 1, found "
          << (mesh ? name + "=" + std::to_string(sizeOf(context_))
                   : std::string("no mesh"));
      return signalPassFailure();
    }
    if (kind == "ring") {
      if (failed(annotateRing(module, function)))
        return signalPassFailure();
      return;
    }
    if (kind == "allgather") {
      // Each attention's keys and values whole along the sequence: an
      // all_gather before it; its queries stay this rank's piece.
      SmallVector<graph::AttentionOp> attentions;
      function.walk([&](graph::AttentionOp op) { attentions.push_back(op); });
      for (graph::AttentionOp op : attentions)
        for (Value value : {op.getKey(), op.getValue()})
          if (failed(constrain(op, value, /*headsOverContext=*/false)))
            return signalPassFailure();
      return;
    }
    if (kind != "ulysses") {
      function.emitError() << "unknown context-parallel kind '" << kind
                           << "': expected ulysses, allgather or ring";
      return signalPassFailure();
    }
    // Ulysses: each sequence-whole op's 4-D operands split by heads.
    SmallVector<Operation *> wholeSequence;
    function.walk([&](Operation *op) {
      if (llvm::isa<graph::RopeOp, graph::AttentionOp>(op))
        wholeSequence.push_back(op);
    });
    llvm::DenseSet<Value> done;
    for (Operation *op : wholeSequence)
      for (OpOperand &operand : op->getOpOperands()) {
        Value value = operand.get();
        auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
        if (!type || type.getRank() != 4 || done.contains(value))
          continue;
        // A rope over one head (latent attention's key part, which every
        // head shares after a broadcast) rotates this rank's piece of the
        // sequence where it is: only the attention needs the heads split.
        if (isa<graph::RopeOp>(op) && type.getDimSize(2) == 1)
          continue;
        if (failed(constrain(op, value, /*headsOverContext=*/true)))
          return signalPassFailure();
        done.insert(value);
      }
  }

private:
  /// Ring: keys and values whole (gathered, then lowered to the ring),
  /// their gradients split along the sequence where attention_grad makes
  /// them; with load balance, the zigzag order.
  LogicalResult annotateRing(ModuleOp module, func::FuncOp function) {
    int64_t chunks = loadBalance ? 2 * sizeOf(context_) : 0;
    if (chunks > 1 && failed(storeZigzag(function, chunks)))
      return failure();
    SmallVector<graph::AttentionOp> attentions;
    function.walk([&](graph::AttentionOp op) { attentions.push_back(op); });
    // Keys and values already constrained (shared by the forward and the
    // backward, or keys that are the values) are not constrained again.
    // Operands 1 and 2 of attention and attention_grad.
    auto constrainKeysAndValues = [&](Operation *op) {
      for (unsigned operand : {1u, 2u}) {
        Value value = op->getOperand(operand);
        if (!value.getDefiningOp<ShardOp>() &&
            failed(constrain(op, value, /*headsOverContext=*/false)))
          return failure();
      }
      return success();
    };
    for (graph::AttentionOp op : attentions)
      if (failed(constrainKeysAndValues(op)))
        return failure();
    SmallVector<graph::AttentionGradOp> gradients;
    function.walk([&](graph::AttentionGradOp op) { gradients.push_back(op); });
    for (graph::AttentionGradOp op : gradients) {
      if (failed(constrainKeysAndValues(op)))
        return failure();
      for (Value grad : {op.getKeyGrad(), op.getValueGrad()})
        if (failed(constrain(op, grad, /*headsOverContext=*/false,
                             /*sequenceOverContext=*/true)))
          return failure();
    }
    return success();
  }

  /// Marks the token inputs and the position-aware ops: the sequence is
  /// stored in zigzag order of `chunks` chunks.
  LogicalResult storeZigzag(func::FuncOp function, int64_t chunks) {
    MLIRContext *context = &getContext();
    auto chunksAttr = IntegerAttr::get(IntegerType::get(context, 64), chunks);
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto role = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kRoleAttrName);
      if (!role || role.getValue() != "input")
        continue;
      auto type = llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
      if (type.getRank() < 2 || type.getDimSize(1) % chunks != 0) {
        auto name = function.getArgAttrOfType<StringAttr>(
            i, graph::GraphDialect::kParamNameAttrName);
        return function.emitError()
               << "ring attention balances the causal mask by cutting the "
                  "sequence into 2 x cp = "
               << chunks << " chunks: expected input \""
               << (name ? name.getValue() : StringRef("?"))
               << "\" to have a sequence divisible by " << chunks
               << ", found " << type;
      }
      function.setArgAttr(i, TrellisDialect::kSequenceChunksAttrName,
                          chunksAttr);
    }
    function.walk([&](Operation *op) {
      if (llvm::isa<graph::RopeOp, graph::AttentionOp, graph::AttentionGradOp,
                    graph::PositionsOp>(op))
        op->setAttr("chunks", chunksAttr);
    });
    return success();
  }

  int64_t sizeOf(ArrayRef<StringAttr> axes) const {
    return mesh_ ? mesh_.getGroupSize(axes) : 1;
  }

  /// Constrains `value` ([batch, seq, heads, head_dim], read by `user`) to
  /// be whole along the sequence (split over the context axis with
  /// `sequenceOverContext`), split by heads over the tensor axis (then the
  /// context axis, with `headsOverContext`: Ulysses) and by batch over the
  /// batch axes, where it is made: every reader (the forward's and the
  /// backward's) gets that layout.
  LogicalResult constrain(Operation *user, Value value, bool headsOverContext,
                          bool sequenceOverContext = false) {
    auto type = llvm::cast<RankedTensorType>(value.getType());
    int64_t heads = type.getDimSize(2);
    int64_t tp = sizeOf(tensor_), dp = sizeOf(batch_);
    int64_t cp = headsOverContext ? sizeOf(context_) : 1;
    if (heads % (tp * cp) != 0)
      return user->emitOpError()
             << (headsOverContext ? "Ulysses splits the "
                 : kind == "ring"   ? "ring attention splits the "
                                    : "all-gather attention splits the ")
             << heads << " heads of its operand over tp x cp = " << tp
             << " x " << cp
             << ": expected heads (kv heads with grouped-query attention) "
                "divisible by "
             << tp * cp;
    MLIRContext *context = &getContext();
    auto axesOf = [&](ArrayRef<ArrayRef<StringAttr>> lists) {
      SmallVector<StringAttr> axes;
      for (ArrayRef<StringAttr> list : lists)
        for (StringAttr name : list)
          if (sizeOf(name) > 1)
            axes.push_back(name);
      return DimShardingAttr::get(context, axes, false);
    };
    SmallVector<DimShardingAttr> dims = {
        type.getDimSize(0) % dp == 0 ? axesOf({batch_}) : axesOf({}),
        sequenceOverContext ? axesOf({context_}) : axesOf({}),
        headsOverContext ? axesOf({tensor_, context_}) : axesOf({tensor_}),
        axesOf({})};
    auto layout = ShardingAttr::get(
        context, FlatSymbolRefAttr::get(context, "mesh"), dims);
    OpBuilder builder(context);
    Operation *producer = value.getDefiningOp();
    if (producer)
      builder.setInsertionPointAfter(producer);
    else
      builder.setInsertionPointToStart(value.getParentBlock());
    auto constraint =
        ShardOp::create(builder, value.getLoc(), type, value, layout);
    graph::copyPlacement(producer ? producer : user, constraint);
    value.replaceAllUsesExcept(constraint.getResult(), constraint);
    return success();
  }

  MeshAttr mesh_;
  /// The axes of @mesh by role, major to minor.
  SmallVector<StringAttr> context_, tensor_, batch_;
};

} // namespace
