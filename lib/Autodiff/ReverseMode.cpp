//===- ReverseMode.cpp - A forward pass and loss to their gradients ------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/ADT/ScopeExit.h"

#include "WeightGradients.h"

namespace trellis {
#define GEN_PASS_DEF_REVERSEMODEPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

/// A constant tensor of `value` with `shape`.
Value fill(OpBuilder &builder, Location loc, ArrayRef<int64_t> shape,
           double value) {
  return FillOp::create(builder, loc, builder.getDenseI64ArrayAttr(shape),
                        builder.getF64FloatAttr(value));
}

Value zerosLike(OpBuilder &builder, Location loc, Value value) {
  return fill(builder, loc,
              llvm::cast<RankedTensorType>(value.getType()).getShape(), 0.0);
}

/// `a + b` for two zero-padded pieces of one tensor that meet along one
/// dimension (the gradients of slices that tile it, such as GPT-2's q, k
/// and v slices of the fused c_attn weight): their concatenation, padded
/// where the pieces were, instead of adds over padded copies. Null when the
/// pieces do not meet so, or a piece is read already.
Value joinPaddedPieces(OpBuilder &builder, Location loc, Value a, Value b) {
  auto padA = a.getDefiningOp<PadOp>(), padB = b.getDefiningOp<PadOp>();
  if (!padA || !padB || !a.use_empty() || !b.use_empty())
    return Value();
  ArrayRef<int64_t> shape =
      llvm::cast<RankedTensorType>(a.getType()).getShape();
  std::optional<size_t> along;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (padA.getLow()[d] == padB.getLow()[d] &&
        padA.getHigh()[d] == padB.getHigh()[d])
      continue;
    if (along)
      return Value(); // the pieces differ in two dimensions
    along = d;
  }
  if (!along)
    return Value(); // the same box twice: a sum
  size_t d = *along;
  PadOp first = padA.getLow()[d] < padB.getLow()[d] ? padA : padB;
  PadOp second = first == padA ? padB : padA;
  if (shape[d] - first.getHigh()[d] != second.getLow()[d])
    return Value(); // a gap or an overlap between them
  // Pieces joined before along the same dimension join as one list.
  SmallVector<Value> inputs;
  SmallVector<Operation *> joined;
  for (PadOp pad : {first, second}) {
    auto concat = pad.getInput().getDefiningOp<ConcatOp>();
    if (concat &&
        static_cast<int64_t>(concat.getDim()) == static_cast<int64_t>(d) &&
        concat->hasOneUse()) {
      inputs.append(concat.getInputs().begin(), concat.getInputs().end());
      joined.push_back(concat);
    } else {
      inputs.push_back(pad.getInput());
    }
  }
  Value result = ConcatOp::create(builder, loc, inputs, d);
  SmallVector<int64_t> low(first.getLow()), high(first.getHigh());
  high[d] = second.getHigh()[d];
  if (llvm::any_of(low, [](int64_t n) { return n != 0; }) ||
      llvm::any_of(high, [](int64_t n) { return n != 0; }))
    result = PadOp::create(builder, loc, result, low, high);
  padA.erase();
  padB.erase();
  for (Operation *concat : joined)
    concat->erase();
  return result;
}

StringAttr roleOf(func::FuncOp function, unsigned index) {
  return function.getArgAttrOfType<StringAttr>(index,
                                               GraphDialect::kRoleAttrName);
}

/// Gradients of values, accumulated as they are produced. A parameter's
/// gradient is summed per model part (of the op whose gradient rule made
/// it) first and the parts' sums are added once at the end: a parameter
/// two parts share (GPT-2's tied embedding, used by the embedding and the
/// head) then has one accumulation per part, which a pipeline keeps on
/// each part's stage.
class GradientMap {
public:
  explicit GradientMap(OpBuilder &builder) : builder_(builder) {}

  /// Adds `gradient` to `value`'s; `part` is the part of the op that read
  /// `value` (it matters for arguments only).
  void accumulate(Location loc, Value value, Value gradient,
                  PartAttr part = {}) {
    if (!gradient)
      return;
    if (!llvm::isa<BlockArgument>(value))
      part = {};
    auto key = std::make_pair(value, part);
    auto [slot, inserted] = gradients_.try_emplace(key, gradient);
    if (inserted) {
      parts_[value].push_back(part);
      return;
    }
    if (Value joined = joinPaddedPieces(builder_, loc, slot->second, gradient))
      slot->second = joined;
    else
      slot->second = AddOp::create(builder_, loc, slot->second, gradient);
  }

  /// The gradient of an op result (null if nothing reached it).
  Value lookup(Value value) const {
    return gradients_.lookup(std::make_pair(value, PartAttr()));
  }

  /// The part that contributed to `param`'s gradient last (the backward
  /// finishes its sum there); null if none did.
  PartAttr lastPart(Value param) const {
    auto parts = parts_.lookup(param);
    return parts.empty() ? PartAttr() : parts.back();
  }

  /// The whole gradient of a parameter: its parts' sums added in the order
  /// the parts first contributed (null if none did). The adds are appended
  /// to `adds`.
  Value total(Location loc, Value param, SmallVectorImpl<Operation *> &adds) {
    Value sum;
    for (PartAttr part : parts_.lookup(param)) {
      Value partial = gradients_.lookup(std::make_pair(param, part));
      if (!sum) {
        sum = partial;
        continue;
      }
      auto add = AddOp::create(builder_, loc, sum, partial);
      adds.push_back(add);
      sum = add;
    }
    return sum;
  }

private:
  OpBuilder &builder_;
  DenseMap<std::pair<Value, PartAttr>, Value> gradients_;
  DenseMap<Value, SmallVector<PartAttr, 1>> parts_;
};

/// Marks every op the builder inserts with the part whose gradient is being
/// built (ModelPartMarker) and with the phase being built (graph.phase;
/// none for the ops of the step after the micro-batch).
class PhaseTagger : public ModelPartMarker {
public:
  /// "forward", "backward", or empty after the micro-batch.
  void setPhase(StringRef phase, MLIRContext *context) {
    phase_ = phase.empty() ? StringAttr() : StringAttr::get(context, phase);
  }

  void notifyOperationInserted(Operation *op,
                               OpBuilder::InsertPoint point) override {
    ModelPartMarker::notifyOperationInserted(op, point);
    if (phase_)
      op->setAttr(GraphDialect::kPhaseAttrName, phase_);
  }

private:
  StringAttr phase_;
};

struct ReverseModePass
    : public trellis::impl::ReverseModePassBase<ReverseModePass> {
  using ReverseModePassBase::ReverseModePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(forwardName);
    if (!forward) {
      module.emitError() << "expected a function @" << forwardName
                         << " to differentiate, found none";
      return signalPassFailure();
    }
    if (failed(verifyForward(forward)) ||
        failed(buildGradients(module, forward)))
      return signalPassFailure();
  }

  LogicalResult verifyForward(func::FuncOp forward) {
    if (forward.isExternal())
      return forward.emitError("expected a body to differentiate");
    FunctionType type = forward.getFunctionType();
    auto loss = type.getNumResults() == 1
                    ? llvm::dyn_cast<RankedTensorType>(type.getResult(0))
                    : RankedTensorType();
    if (!loss || loss.getRank() != 0 || !loss.getElementType().isF32())
      return forward.emitError()
             << "expected a single tensor<f32> loss result, found "
             << type.getResults();
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      StringAttr role = roleOf(forward, i);
      if (!role ||
          !llvm::is_contained({"param", "input", "loss_scale", "state"},
                              role.getValue()))
        return forward.emitError()
               << "argument " << i
               << " needs graph.role \"param\", \"input\", \"loss_scale\" "
                  "or \"state\", found "
               << (role ? role.getValue() : StringRef("none"));
      if ((role.getValue() == "param" || role.getValue() == "state") &&
          !llvm::cast<ShapedType>(forward.getArgumentTypes()[i])
               .getElementType()
               .isF32())
        return forward.emitError()
               << (role.getValue() == "param" ? "parameter" : "state")
               << " argument " << i << " must be an f32 tensor, found "
               << forward.getArgumentTypes()[i];
    }
    return success();
  }

  /// Reverse mode over `forwardOps` (in program order), from the
  /// gradients already in `gradients`; appends the backward ops at the
  /// builder's insertion point.
  LogicalResult buildBackward(OpBuilder &builder, Location loc,
                              ArrayRef<Operation *> forwardOps,
                              GradientMap &gradients) {
    auto *marker = static_cast<ModelPartMarker *>(builder.getListener());
    llvm::scope_exit restorePart(
        [marker, part = marker->getPart()] { marker->setPart(part); });
    for (Operation *op : llvm::reverse(forwardOps)) {
      marker->setPart(getModelPart(op));
      SmallVector<Value> resultGradients;
      bool reachesLoss = false;
      for (Value result : op->getResults()) {
        resultGradients.push_back(gradients.lookup(result));
        reachesLoss |= static_cast<bool>(resultGradients.back());
      }
      if (!reachesLoss)
        continue;
      auto differentiable = llvm::dyn_cast<GradientOpInterface>(op);
      if (!differentiable)
        return op->emitOpError("has no gradient rule (GradientOpInterface)");
      // Results that do not reach the loss get a zero gradient.
      for (auto [result, gradient] :
           llvm::zip(op->getResults(), resultGradients))
        if (!gradient)
          gradient = zerosLike(builder, loc, result);
      SmallVector<Value> operandGradients;
      if (failed(differentiable.buildGradients(builder, resultGradients,
                                               operandGradients)))
        return failure();
      if (operandGradients.size() != op->getNumOperands())
        return op->emitOpError()
               << "gradient rule returned " << operandGradients.size()
               << " gradients for " << op->getNumOperands() << " operands";
      for (auto [operand, gradient] :
           llvm::zip(op->getOperands(), operandGradients))
        gradients.accumulate(op->getLoc(), operand, gradient,
                             getModelPart(op));
    }
    return success();
  }

  LogicalResult buildGradients(ModuleOp module, func::FuncOp forward) {
    OpBuilder builder(module.getContext());
    Location loc = forward.getLoc();
    if (module.lookupSymbol("gradients"))
      return module.emitError() << "function @gradients already exists";
    builder.setInsertionPointAfter(forward);
    auto step = func::FuncOp::create(builder, loc, "gradients",
                                     forward.getFunctionType());
    step.setAllArgAttrs(forward.getAllArgAttrs());
    Block *body = step.addEntryBlock();
    builder.setInsertionPointToStart(body);
    IRMapping mapping;
    for (auto [from, to] :
         llvm::zip(forward.getArguments(), body->getArguments()))
      mapping.map(from, to);

    // The micro-batch: a copy of @forward's body, then its backward from
    // d(loss) = loss-scale.
    GradientMap gradients(builder);
    PhaseTagger tagger;
    builder.setListener(&tagger);
    tagger.setPhase("forward", builder.getContext());
    SmallVector<Operation *> forwardOps;
    for (Operation &op : forward.getBody().front().without_terminator())
      forwardOps.push_back(builder.clone(op, mapping));
    Value loss =
        mapping.lookup(forward.getBody().front().getTerminator()->getOperand(0));
    tagger.setPhase("backward", builder.getContext());
    // The seed of the backward belongs to the part that makes the loss.
    if (Operation *lossOp = loss.getDefiningOp())
      tagger.setPart(getModelPart(lossOp));
    gradients.accumulate(loc, loss, fill(builder, loc, {}, lossScale));
    tagger.setPart({});
    if (failed(buildBackward(builder, loc, forwardOps, gradients)))
      return failure();

    // The parts' sums of each parameter's gradient: added by the step, or
    // by the micro-batch's backward in the part that contributed last
    // (sumPartsInMicroBatch); parameters the loss does not depend on get a
    // zero gradient.
    SmallVector<Value> results = {loss};
    SmallVector<DictionaryAttr> resultAttrs = {builder.getDictionaryAttr({})};
    SmallVector<Operation *> partSums;
    for (BlockArgument param : body->getArguments()) {
      if (roleOf(step, param.getArgNumber()).getValue() != "param")
        continue;
      tagger.setPhase(sumPartsInMicroBatch ? "backward" : "",
                      builder.getContext());
      tagger.setPart(sumPartsInMicroBatch ? gradients.lastPart(param)
                                          : PartAttr());
      Value gradient = gradients.total(loc, param, partSums);
      tagger.setPhase("", builder.getContext());
      tagger.setPart({});
      if (!gradient)
        gradient = zerosLike(builder, loc, param);
      results.push_back(gradient);
      resultAttrs.push_back(builder.getDictionaryAttr({builder.getNamedAttr(
          "graph.gradient_of",
          builder.getI64IntegerAttr(param.getArgNumber()))}));
    }
    builder.setListener(nullptr);
    func::ReturnOp::create(builder, loc, results);
    // Gradients of data inputs are built by the rules but never used.
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(body->getOperations())))
      if (isOpTriviallyDead(&op))
        op.erase();
    markWeightGradients(*body, partSums);
    SmallVector<Type> resultTypes;
    for (Value result : results)
      resultTypes.push_back(result.getType());
    step.setType(builder.getFunctionType(forward.getArgumentTypes(),
                                         resultTypes));
    step.setAllResultAttrs(resultAttrs);
    return success();
  }
};

} // namespace
