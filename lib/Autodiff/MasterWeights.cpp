//===- MasterWeights.cpp - 16-bit parameters, fp32 masters as state -------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis {
#define GEN_PASS_DEF_MASTERWEIGHTSPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

/// A parameter whose micro-batch reads all go through casts to one dtype.
struct CastParameter {
  unsigned argument;
  /// Its casts (each model part's, and recomputed copies).
  SmallVector<CastOp> casts;
  /// The optimizer op that updates it (its first operand).
  Operation *update;
  /// The step's result of the update.
  unsigned result;
  Type compute;
};

struct MasterWeightsPass
    : public trellis::impl::MasterWeightsPassBase<MasterWeightsPass> {
  using MasterWeightsPassBase::MasterWeightsPassBase;

  void runOnOperation() override {
    auto step = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!step || step.isExternal()) {
      getOperation().emitError()
          << "expected a training step @" << functionName
          << " to keep master weights of, found none";
      return signalPassFailure();
    }
    SmallVector<CastParameter> parameters = findCastParameters(step);
    if (!parameters.empty())
      rewrite(step, parameters);
  }

private:
  /// Parameters read only by casts to one 16-bit float type and updated by
  /// one optimizer op whose result the step returns as their update.
  SmallVector<CastParameter> findCastParameters(func::FuncOp step) {
    Block &body = step.getBody().front();
    Operation *terminator = body.getTerminator();
    DenseMap<unsigned, unsigned> resultOf;
    for (unsigned r = 0; r < step.getNumResults(); ++r)
      if (auto of = step.getResultAttrOfType<IntegerAttr>(
              r, GraphDialect::kUpdatesAttrName))
        resultOf[of.getInt()] = r;
    SmallVector<CastParameter> found;
    for (BlockArgument argument : body.getArguments()) {
      auto role = step.getArgAttrOfType<StringAttr>(argument.getArgNumber(),
                                                    GraphDialect::kRoleAttrName);
      if (!role || role.getValue() != "param")
        continue;
      CastParameter parameter{argument.getArgNumber(), {}, nullptr, 0, Type()};
      bool eligible = resultOf.count(argument.getArgNumber());
      for (OpOperand &use : argument.getUses()) {
        Operation *user = use.getOwner();
        if (auto cast = llvm::dyn_cast<CastOp>(user)) {
          Type to = cast.getResult().getType().getElementType();
          eligible &= to.getIntOrFloatBitWidth() == 16 &&
                      (!parameter.compute || parameter.compute == to);
          parameter.compute = to;
          parameter.casts.push_back(cast);
          continue;
        }
        bool isUpdate = graph::isUpdate(user) &&
                        use.getOperandNumber() == 0 && !parameter.update;
        eligible &= isUpdate;
        parameter.update = user;
      }
      if (!eligible || parameter.casts.empty() || !parameter.update)
        continue;
      parameter.result = resultOf[argument.getArgNumber()];
      if (terminator->getOperand(parameter.result) !=
          parameter.update->getResult(0))
        continue;
      found.push_back(std::move(parameter));
    }
    return found;
  }

  void rewrite(func::FuncOp step, ArrayRef<CastParameter> parameters) {
    Block &body = step.getBody().front();
    Operation *terminator = body.getTerminator();
    OpBuilder builder(&getContext());
    SmallVector<Type> argTypes(step.getArgumentTypes());
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      argAttrs.push_back(step.getArgAttrDict(i));
    SmallVector<Value> results(terminator->getOperands());
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned r = 0; r < step.getNumResults(); ++r)
      resultAttrs.push_back(step.getResultAttrDict(r));

    for (const CastParameter &parameter : parameters) {
      BlockArgument param = body.getArgument(parameter.argument);
      auto masterType = llvm::cast<RankedTensorType>(param.getType());
      // The master: the parameter's name, initial values and layout, f32.
      NamedAttrList attrs(argAttrs[parameter.argument]);
      attrs.set(GraphDialect::kRoleAttrName, builder.getStringAttr("master"));
      unsigned masterIndex = argTypes.size();
      argTypes.push_back(masterType);
      argAttrs.push_back(attrs.getDictionary(&getContext()));
      Value master = body.addArgument(masterType, param.getLoc());

      // The parameter itself holds the compute copy.
      param.setType(masterType.clone(parameter.compute));
      argTypes[parameter.argument] = param.getType();
      for (CastOp cast : parameter.casts) {
        cast.getResult().replaceAllUsesWith(param);
        cast.erase();
      }
      // The optimizer updates the master; the new parameter is its cast.
      parameter.update->setOperand(0, master);
      Value newMaster = parameter.update->getResult(0);
      builder.setInsertionPoint(terminator);
      std::optional<ElementType> element = toElementType(parameter.compute);
      auto cast = CastOp::create(builder, parameter.update->getLoc(), newMaster,
                                 builder.getStringAttr(elementTypeName(*element)));
      if (PartAttr part = getModelPart(parameter.update))
        setModelPart(cast, part);
      results[parameter.result] = cast.getResult();
      results.push_back(newMaster);
      resultAttrs.push_back(builder.getDictionaryAttr({builder.getNamedAttr(
          GraphDialect::kUpdatesAttrName,
          builder.getI64IntegerAttr(masterIndex))}));
    }
    terminator->setOperands(results);
    SmallVector<Type> resultTypes;
    for (Value result : results)
      resultTypes.push_back(result.getType());
    step.setType(builder.getFunctionType(argTypes, resultTypes));
    step.setAllArgAttrs(argAttrs);
    step.setAllResultAttrs(resultAttrs);
  }
};

} // namespace
