//===- Autodiff.cpp - Forward pass and loss to a training step ------------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/ScopeExit.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

enum class Optimizer { AdamW, Sgd, None };

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
    slot->second = AddOp::create(builder_, loc, slot->second, gradient);
  }

  /// The gradient of an op result (null if nothing reached it).
  Value lookup(Value value) const {
    return gradients_.lookup(std::make_pair(value, PartAttr()));
  }

  /// The whole gradient of a parameter: its parts' sums added in the order
  /// the parts first contributed (null if none did). With `accumulate`,
  /// each part's sum is first summed over the micro-batches
  /// (graph.microbatch_sum, marked with the part).
  Value total(Location loc, Value param, bool accumulate,
              ModelPartMarker &marker) {
    Value sum;
    for (PartAttr part : parts_.lookup(param)) {
      Value partial = gradients_.lookup(std::make_pair(param, part));
      if (accumulate) {
        marker.setPart(part);
        partial = MicrobatchSumOp::create(builder_, loc, partial);
        marker.setPart({});
      }
      sum = sum ? AddOp::create(builder_, loc, sum, partial).getResult()
                : partial;
    }
    return sum;
  }

private:
  OpBuilder &builder_;
  DenseMap<std::pair<Value, PartAttr>, Value> gradients_;
  DenseMap<Value, SmallVector<PartAttr, 1>> parts_;
};

/// Marks every op the builder inserts with the part whose gradient is being
/// built (ModelPartMarker) and, when tagging phases, with the phase of the
/// micro-batch being built (graph.phase; none outside the micro-batch).
class PhaseTagger : public ModelPartMarker {
public:
  explicit PhaseTagger(bool tagPhases) : tagPhases_(tagPhases) {}

  /// "forward", "backward", or empty after the micro-batch.
  void setPhase(StringRef phase, MLIRContext *context) {
    phase_ = tagPhases_ && !phase.empty() ? StringAttr::get(context, phase)
                                          : StringAttr();
  }

  void notifyOperationInserted(Operation *op,
                               OpBuilder::InsertPoint point) override {
    ModelPartMarker::notifyOperationInserted(op, point);
    if (phase_)
      op->setAttr(GraphDialect::kPhaseAttrName, phase_);
  }

private:
  bool tagPhases_;
  StringAttr phase_;
};

struct AutodiffPass : public trellis::impl::AutodiffPassBase<AutodiffPass> {
  using AutodiffPassBase::AutodiffPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(forwardName);
    if (!forward) {
      module.emitError() << "expected a function @" << forwardName
                         << " to differentiate, found none";
      return signalPassFailure();
    }
    std::optional<Optimizer> kind = parseOptimizer();
    if (!kind) {
      forward.emitError() << "unknown optimizer '" << optimizer
                          << "': expected adamw, sgd or none";
      return signalPassFailure();
    }
    if (recompute != "none" && recompute != "selective" &&
        recompute != "full") {
      forward.emitError() << "unknown recomputation '" << recompute
                          << "': expected none, selective or full";
      return signalPassFailure();
    }
    if (microBatches < 1) {
      forward.emitError() << "expected micro-batches >= 1, found "
                          << static_cast<int64_t>(microBatches);
      return signalPassFailure();
    }
    if (failed(verifyForward(forward)) ||
        failed(buildTrainStep(module, forward, *kind)))
      return signalPassFailure();
  }

  std::optional<Optimizer> parseOptimizer() const {
    if (optimizer == "adamw")
      return Optimizer::AdamW;
    if (optimizer == "sgd")
      return Optimizer::Sgd;
    if (optimizer == "none")
      return Optimizer::None;
    return std::nullopt;
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
      if (!role || (role.getValue() != "param" && role.getValue() != "input"))
        return forward.emitError()
               << "argument " << i
               << " needs graph.role \"param\" or \"input\", found "
               << (role ? role.getValue() : StringRef("none"));
      if (role.getValue() == "param" &&
          !llvm::cast<ShapedType>(forward.getArgumentTypes()[i])
               .getElementType()
               .isF32())
        return forward.emitError()
               << "parameter argument " << i << " must be an f32 tensor, found "
               << forward.getArgumentTypes()[i];
    }
    return success();
  }

  /// Adds an argument to `block` and records its type and attributes.
  Value addArgument(Block *block, Type type, DictionaryAttr attrs,
                    SmallVectorImpl<Type> &types,
                    SmallVectorImpl<DictionaryAttr> &allAttrs, Location loc) {
    types.push_back(type);
    allAttrs.push_back(attrs);
    return block->addArgument(type, loc);
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

  /// The backward of `forwardOps` (one micro-batch's forward, in program
  /// order), recomputing each named part first when asked to.
  LogicalResult buildMicroBatchBackward(OpBuilder &builder, Location loc,
                                        ArrayRef<Operation *> forwardOps,
                                        GradientMap &gradients) {
    // Selective recomputation (of the attention core) is what the fused
    // attention gradient always does: it recomputes the probabilities
    // from query and key, so no [S, S] value is ever kept.
    if (recompute != "full")
      return buildBackward(builder, loc, forwardOps, gradients);
    // Parts: maximal runs of ops of one model part, last part first.
    SmallVector<ArrayRef<Operation *>> parts;
    for (size_t begin = 0, end; begin < forwardOps.size(); begin = end) {
      PartAttr part = getModelPart(forwardOps[begin]);
      for (end = begin + 1;
           end < forwardOps.size() && getModelPart(forwardOps[end]) == part;
           ++end) {
      }
      parts.push_back(forwardOps.slice(begin, end - begin));
    }
    for (auto [index, part] : llvm::enumerate(llvm::reverse(parts))) {
      // The last part's backward follows its forward at once: nothing to
      // save by recomputing it.
      if (index == 0 || !getModelPart(part.front())) {
        if (failed(buildBackward(builder, loc, part, gradients)))
          return failure();
        continue;
      }
      // Recompute the part from the values it reads, move the gradients
      // its results have gathered so far onto the copies, and differentiate
      // the copies.
      IRMapping mapping;
      SmallVector<Operation *> copies;
      for (Operation *op : part)
        copies.push_back(builder.clone(*op, mapping));
      for (auto [op, copy] : llvm::zip(part, copies))
        for (auto [result, copied] :
             llvm::zip(op->getResults(), copy->getResults()))
          gradients.accumulate(loc, copied, gradients.lookup(result));
      if (failed(buildBackward(builder, loc, copies, gradients)))
        return failure();
    }
    return success();
  }

  /// Re-marks the backward ops that only make their part's parameter
  /// gradients as phase "weight": those whose every use is by such an op of
  /// the same model part, by an op of the whole step (gradient sums,
  /// optimizer) or by the results. The rest of the backward makes the
  /// gradients other parts wait for; a zero-bubble schedule runs the weight
  /// part later.
  static void markWeightGradients(Block &body) {
    StringAttr weight =
        StringAttr::get(body.getParentOp()->getContext(), "weight");
    for (Operation &op : llvm::reverse(body.without_terminator())) {
      auto phase = op.getAttrOfType<StringAttr>(GraphDialect::kPhaseAttrName);
      PartAttr part = getModelPart(&op);
      if (!phase || phase.getValue() != "backward" || op.use_empty() || !part)
        continue;
      bool onlyWeights = llvm::all_of(op.getUsers(), [&](Operation *user) {
        auto userPhase =
            user->getAttrOfType<StringAttr>(GraphDialect::kPhaseAttrName);
        return !userPhase ||
               (userPhase == weight && getModelPart(user) == part);
      });
      if (onlyWeights)
        op.setAttr(GraphDialect::kPhaseAttrName, weight);
    }
  }

  LogicalResult buildTrainStep(ModuleOp module, func::FuncOp forward,
                               Optimizer kind) {
    OpBuilder builder(module.getContext());
    Location loc = forward.getLoc();
    StringRef stepName = kind == Optimizer::None ? "gradients" : "train_step";
    if (module.lookupSymbol(stepName))
      return module.emitError()
             << "function @" << stepName << " already exists";
    builder.setInsertionPointAfter(forward);
    auto step = func::FuncOp::create(builder, loc, stepName,
                                     builder.getFunctionType({}, {}));
    Block *body = step.addEntryBlock();
    builder.setInsertionPointToStart(body);

    // Arguments: those of @forward (inputs hold one micro-batch), then
    // optimizer states, then the step.
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    IRMapping mapping;
    SmallVector<unsigned> params;
    for (BlockArgument arg : forward.getArguments()) {
      unsigned index = arg.getArgNumber();
      if (roleOf(forward, index).getValue() == "param")
        params.push_back(argTypes.size());
      mapping.map(arg, addArgument(body, arg.getType(),
                                   forward.getArgAttrDict(index), argTypes,
                                   argAttrs, arg.getLoc()));
    }

    // One micro-batch: a copy of @forward's body, then its backward from
    // d(loss) = 1 / m. Its ops run once per micro-batch; the loss and the
    // parameter gradients reach the step through graph.microbatch_sum
    // (when there are several micro-batches or a pipeline cuts the step).
    bool accumulate = microBatches > 1 || tagActions;
    GradientMap gradients(builder);
    PhaseTagger tagger(accumulate);
    builder.setListener(&tagger);
    tagger.setPhase("forward", builder.getContext());
    SmallVector<Operation *> forwardOps;
    for (Operation &op : forward.getBody().front().without_terminator())
      forwardOps.push_back(builder.clone(op, mapping));
    Value loss =
        mapping.lookup(forward.getBody().front().getTerminator()->getOperand(0));
    tagger.setPhase("backward", builder.getContext());
    // The seed of the backward belongs to the part that makes the loss.
    PartAttr lossPart;
    if (Operation *lossOp = loss.getDefiningOp())
      lossPart = getModelPart(lossOp);
    tagger.setPart(lossPart);
    gradients.accumulate(loc, loss, fill(builder, loc, {}, 1.0 / microBatches));
    tagger.setPart({});
    if (failed(buildMicroBatchBackward(builder, loc, forwardOps, gradients)))
      return failure();
    tagger.setPhase("", builder.getContext());
    if (accumulate) {
      tagger.setPart(lossPart);
      loss = MicrobatchSumOp::create(builder, loc, loss);
      tagger.setPart({});
    }
    if (microBatches > 1)
      loss = MulOp::create(builder, loc, loss,
                           fill(builder, loc, {}, 1.0 / microBatches));

    // Parameters the loss does not depend on get a zero gradient.
    SmallVector<Value> paramGradients;
    for (unsigned index : params) {
      Value param = body->getArgument(index);
      Value gradient = gradients.total(loc, param, accumulate, tagger);
      if (!gradient)
        gradient = zerosLike(builder, loc, param);
      paramGradients.push_back(gradient);
    }

    SmallVector<Value> results = {loss};
    SmallVector<DictionaryAttr> resultAttrs = {builder.getDictionaryAttr({})};
    auto marked = [&](StringRef name, int64_t index) {
      return builder.getDictionaryAttr(
          {builder.getNamedAttr(name, builder.getI64IntegerAttr(index))});
    };
    auto stateAttrs = [&](unsigned paramIndex, StringRef role) {
      return builder.getDictionaryAttr({
          builder.getNamedAttr(GraphDialect::kRoleAttrName,
                               builder.getStringAttr(role)),
          builder.getNamedAttr(
              GraphDialect::kParamNameAttrName,
              argAttrs[paramIndex].get(GraphDialect::kParamNameAttrName)),
          builder.getNamedAttr(GraphDialect::kInitAttrName,
                               builder.getStringAttr("zeros")),
      });
    };

    if (kind == Optimizer::None) {
      for (auto [index, gradient] : llvm::zip(params, paramGradients)) {
        results.push_back(gradient);
        resultAttrs.push_back(marked("graph.gradient_of", index));
      }
    } else if (kind == Optimizer::Sgd) {
      for (auto [index, gradient] : llvm::zip(params, paramGradients)) {
        results.push_back(SgdOp::create(builder, loc, body->getArgument(index),
                                        gradient,
                                        builder.getF64FloatAttr(learningRate),
                                        builder.getF64FloatAttr(weightDecay)));
        resultAttrs.push_back(marked(GraphDialect::kUpdatesAttrName, index));
      }
    } else {
      SmallVector<Value> firstMoments, secondMoments;
      SmallVector<unsigned> firstIndices, secondIndices;
      for (unsigned index : params) {
        firstIndices.push_back(argTypes.size());
        firstMoments.push_back(addArgument(body, argTypes[index],
                                           stateAttrs(index, "adam_m"),
                                           argTypes, argAttrs, loc));
      }
      for (unsigned index : params) {
        secondIndices.push_back(argTypes.size());
        secondMoments.push_back(addArgument(body, argTypes[index],
                                            stateAttrs(index, "adam_v"),
                                            argTypes, argAttrs, loc));
      }
      unsigned stepIndex = argTypes.size();
      Value stepCount = addArgument(
          body, RankedTensorType::get({}, builder.getF32Type()),
          builder.getDictionaryAttr({builder.getNamedAttr(
              GraphDialect::kRoleAttrName, builder.getStringAttr("step"))}),
          argTypes, argAttrs, loc);
      (void)stepIndex;
      SmallVector<Value> newParams, newFirst, newSecond;
      for (auto [i, index] : llvm::enumerate(params)) {
        auto update = AdamWOp::create(
            builder, loc, body->getArgument(index), paramGradients[i],
            firstMoments[i], secondMoments[i], stepCount,
            builder.getF64FloatAttr(learningRate),
            builder.getF64FloatAttr(beta1), builder.getF64FloatAttr(beta2),
            builder.getF64FloatAttr(epsilon),
            builder.getF64FloatAttr(weightDecay));
        newParams.push_back(update.getNewParam());
        newFirst.push_back(update.getNewFirstMoment());
        newSecond.push_back(update.getNewSecondMoment());
      }
      for (auto [i, index] : llvm::enumerate(params)) {
        results.push_back(newParams[i]);
        resultAttrs.push_back(marked(GraphDialect::kUpdatesAttrName, index));
      }
      for (auto [i, index] : llvm::enumerate(firstIndices)) {
        results.push_back(newFirst[i]);
        resultAttrs.push_back(marked(GraphDialect::kUpdatesAttrName, index));
      }
      for (auto [i, index] : llvm::enumerate(secondIndices)) {
        results.push_back(newSecond[i]);
        resultAttrs.push_back(marked(GraphDialect::kUpdatesAttrName, index));
      }
    }

    builder.setListener(nullptr);
    func::ReturnOp::create(builder, loc, results);
    // Gradients of data inputs are built by the rules but never used.
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(body->getOperations())))
      if (isOpTriviallyDead(&op))
        op.erase();
    if (tagActions)
      markWeightGradients(*body);
    step->setAttr(GraphDialect::kMicroBatchesAttrName,
                  builder.getI64IntegerAttr(microBatches));
    SmallVector<Type> resultTypes;
    for (Value result : results)
      resultTypes.push_back(result.getType());
    step.setType(builder.getFunctionType(argTypes, resultTypes));
    step.setAllArgAttrs(argAttrs);
    step.setAllResultAttrs(resultAttrs);
    return success();
  }
};

} // namespace
