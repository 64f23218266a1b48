//===- MixedPrecision.cpp - The forward in bf16 or f16 --------------------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_MIXEDPRECISIONPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

bool isFloat(Type elementType) { return llvm::isa<FloatType>(elementType); }

Type elementOf(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getElementType();
}

struct MixedPrecisionPass
    : public trellis::impl::MixedPrecisionPassBase<MixedPrecisionPass> {
  using MixedPrecisionPassBase::MixedPrecisionPassBase;

  void runOnOperation() override {
    auto forward = getOperation().lookupSymbol<func::FuncOp>(forwardName);
    if (!forward || forward.isExternal()) {
      getOperation().emitError()
          << "expected a function @" << forwardName
          << " to compute in mixed precision, found none";
      return signalPassFailure();
    }
    MLIRContext *context = &getContext();
    low_ = compute == LowPrecision::BF16
               ? Type(BFloat16Type::get(context))
               : Type(Float16Type::get(context));
    for (BlockArgument argument : forward.getArguments()) {
      auto role = forward.getArgAttrOfType<StringAttr>(
          argument.getArgNumber(), GraphDialect::kRoleAttrName);
      if (role && role.getValue() == "param")
        params_.insert(argument);
    }
    Block &body = forward.getBody().front();
    if (dynamicLossScale)
      scaleLoss(forward);
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (llvm::isa<func::ReturnOp>(op)) {
        if (failed(castReturn(op)))
          return signalPassFailure();
        continue;
      }
      auto policy = llvm::dyn_cast<PrecisionOpInterface>(op);
      if (!policy)
        continue;
      if (failed(apply(op, policy.getPrecisionPolicy())))
        return signalPassFailure();
    }
  }

private:
  /// `value` cast to `to` before `user`, in `user`'s part. Parameters are
  /// cast once per model part, before their first use there (once, before
  /// their first use, with castParamsOnce).
  Value castFor(Value value, Type to, Operation *user) {
    return castBefore(value, to, user, getModelPart(user));
  }

  /// `value` cast to `to` before `before`, marked with `part`.
  Value castBefore(Value value, Type to, Operation *before, PartAttr part) {
    bool param = params_.contains(value);
    if (param) {
      auto it = paramCasts_.find({value, castParamsOnce ? PartAttr() : part});
      if (it != paramCasts_.end())
        return it->second;
    }
    OpBuilder builder(before);
    std::optional<ElementType> element = toElementType(to);
    auto cast = CastOp::create(
        builder, before->getLoc(), value,
        builder.getStringAttr(elementTypeName(*element)));
    if (part)
      setModelPart(cast, part);
    if (param && reduceGradientsInCompute)
      cast->setAttr(GraphDialect::kReduceFirstAttrName, builder.getUnitAttr());
    if (param)
      paramCasts_[{value, castParamsOnce ? PartAttr() : part}] =
          cast.getResult();
    return cast.getResult();
  }

  LogicalResult apply(Operation &op, PrecisionPolicy policy) {
    if (policy == PrecisionPolicy::Operands)
      return success();
    // An op the model keeps in fp32 (graph.precision): its low-precision
    // operands cast up, its parameters read as they are.
    if (op.hasAttr(GraphDialect::kPrecisionAttrName)) {
      Type f32 = Float32Type::get(&getContext());
      for (OpOperand &operand : op.getOpOperands())
        if (elementOf(operand.get()) == low_)
          operand.set(castFor(operand.get(), f32, &op));
      return reinferResults(op);
    }
    // Float32 ops widen low-precision operands themselves: no casts, their
    // results follow their operands.
    if (policy == PrecisionPolicy::Float32)
      return reinferResults(op);
    SmallVector<unsigned> floats;
    bool anyLow = false, anyParam = false;
    for (OpOperand &operand : op.getOpOperands()) {
      Type element = elementOf(operand.get());
      if (!isFloat(element))
        continue;
      floats.push_back(operand.getOperandNumber());
      anyLow |= element == low_;
      anyParam |= params_.contains(operand.get());
    }
    // Without either, an fp32 region (the loss and what follows it): no
    // casts.
    if (anyLow || anyParam)
      for (unsigned index : floats) {
        Value operand = op.getOperand(index);
        if (elementOf(operand) != low_)
          op.setOperand(index, castFor(operand, low_, &op));
      }
    // Operands made earlier may have changed type too.
    return reinferResults(op);
  }

  /// The loss leaves the forward as f32 (cast in its maker's part).
  LogicalResult castReturn(Operation &ret) {
    Type f32 = Float32Type::get(&getContext());
    for (OpOperand &operand : ret.getOpOperands()) {
      Value value = operand.get();
      if (!isFloat(elementOf(value)) || elementOf(value) == f32)
        continue;
      Operation *maker = value.getDefiningOp();
      operand.set(castBefore(value, f32, &ret,
                             maker ? getModelPart(maker) : PartAttr()));
    }
    return success();
  }

  /// The loss times a scale the runtime sets each step: a new scalar f32
  /// argument of role loss_scale. Reverse mode then seeds the backward
  /// with the scale.
  void scaleLoss(func::FuncOp forward) {
    OpBuilder builder(forward.getContext());
    auto scalar = RankedTensorType::get({}, builder.getF32Type());
    unsigned index = forward.getNumArguments();
    (void)forward.insertArgument(
        index, scalar,
        builder.getDictionaryAttr({builder.getNamedAttr(
            GraphDialect::kRoleAttrName, builder.getStringAttr("loss_scale"))}),
        forward.getLoc());
    Operation *ret = forward.getBody().front().getTerminator();
    Value loss = ret->getOperand(0);
    builder.setInsertionPoint(ret);
    auto scaled = MulOp::create(builder, ret->getLoc(), loss,
                                forward.getArgument(index));
    if (Operation *maker = loss.getDefiningOp())
      if (PartAttr part = getModelPart(maker))
        setModelPart(scaled, part);
    ret->setOperand(0, scaled.getResult());
  }

  /// Result types follow the new operand types.
  LogicalResult reinferResults(Operation &op) {
    auto infer = llvm::dyn_cast<InferTypeOpInterface>(op);
    if (!infer)
      return op.emitOpError("cannot infer its result types");
    SmallVector<Type> types;
    if (failed(infer.inferReturnTypes(
            op.getContext(), op.getLoc(), op.getOperands(),
            op.getRawDictionaryAttrs(), op.getPropertiesStorage(),
            op.getRegions(), types)))
      return failure();
    for (auto [result, type] : llvm::zip(op.getResults(), types))
      result.setType(type);
    return success();
  }

  Type low_;
  llvm::DenseSet<Value> params_;
  llvm::DenseMap<std::pair<Value, Attribute>, Value> paramCasts_;
};

} // namespace
