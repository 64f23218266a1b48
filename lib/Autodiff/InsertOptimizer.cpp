//===- InsertOptimizer.cpp - Gradients to a training step -----------------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Common/LearningRate.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

namespace trellis {
#define GEN_PASS_DEF_INSERTOPTIMIZERPASS
#include "trellis/Autodiff/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

std::string trellis::checkOptimizerHyperparameters(
    double learningRate, double beta1, double beta2, double epsilon,
    double weightDecay, const HyperparameterNames &names) {
  auto number = [](double value) {
    return llvm::formatv("{0}", llvm::format("%g", value)).str();
  };
  if (!std::isfinite(learningRate) || learningRate < 0)
    return std::string(names.learningRate) +
           ": expected a finite number >= 0, found " + number(learningRate);
  for (auto [name, beta] : {std::pair(names.beta1, beta1),
                            std::pair(names.beta2, beta2)})
    if (!(beta >= 0 && beta < 1))
      return std::string(name) + ": expected a number in [0, 1), found " +
             number(beta);
  if (!std::isfinite(epsilon) || epsilon <= 0)
    return std::string(names.epsilon) +
           ": expected a finite number > 0, found " + number(epsilon);
  if (!std::isfinite(weightDecay) || weightDecay < 0)
    return std::string(names.weightDecay) +
           ": expected a finite number >= 0, found " + number(weightDecay);
  return "";
}

namespace {

struct InsertOptimizerPass
    : public trellis::impl::InsertOptimizerPassBase<InsertOptimizerPass> {
  using InsertOptimizerPassBase::InsertOptimizerPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string invalid = checkOptimizerHyperparameters(
        learningRate, beta1, beta2, epsilon, weightDecay,
        {"learning-rate", "beta1", "beta2", "epsilon", "weight-decay"});
    if (!invalid.empty()) {
      module.emitError(invalid);
      return signalPassFailure();
    }
    if (!lrSchedule.empty()) {
      std::optional<LrScheduleKind> kind = parseLrScheduleKind(lrSchedule);
      if (!kind) {
        module.emitError() << "--lr-schedule: expected constant, linear, "
                              "cosine or wsd, found '"
                           << lrSchedule << "'";
        return signalPassFailure();
      }
      if (optimizer != OptimizerKind::AdamW) {
        module.emitError("--lr-schedule: a schedule reads AdamW's step "
                         "count: expected --optimizer adamw, found sgd");
        return signalPassFailure();
      }
      LrSchedule schedule{*kind,       learningRate, minLearningRate,
                          warmupSteps, decaySteps,   wsdDecaySteps};
      if (std::string wrong = checkLrSchedule(schedule); !wrong.empty()) {
        module.emitError(wrong);
        return signalPassFailure();
      }
    }
    auto step = module.lookupSymbol<func::FuncOp>("gradients");
    if (!step || step.isExternal()) {
      module.emitError("expected a function @gradients to add an optimizer "
                       "to, found none");
      return signalPassFailure();
    }
    if (module.lookupSymbol("train_step")) {
      module.emitError("function @train_step already exists");
      return signalPassFailure();
    }
    Block &body = step.getBody().front();
    Operation *terminator = body.getTerminator();
    // (parameter argument, gradient) for every result after the loss.
    SmallVector<std::pair<unsigned, Value>> gradients;
    for (unsigned i = 1; i < terminator->getNumOperands(); ++i) {
      auto of = step.getResultAttrOfType<IntegerAttr>(i, "graph.gradient_of");
      if (!of || of.getInt() < 0 ||
          of.getInt() >= static_cast<int64_t>(body.getNumArguments())) {
        step.emitError() << "expected result " << i
                         << " to be a parameter's gradient "
                            "(graph.gradient_of), found none";
        return signalPassFailure();
      }
      // The optimizer's states are named after their parameter.
      if (!step.getArgAttrOfType<StringAttr>(of.getInt(),
                                             GraphDialect::kParamNameAttrName)) {
        step.emitError() << "expected parameter argument " << of.getInt()
                         << " (result " << i
                         << "'s graph.gradient_of) to have a name "
                            "(graph.param), found none";
        return signalPassFailure();
      }
      gradients.emplace_back(of.getInt(), terminator->getOperand(i));
    }

    OpBuilder builder(&getContext());
    Location loc = step.getLoc();
    SmallVector<Type> argTypes(step.getArgumentTypes());
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      argAttrs.push_back(step.getArgAttrDict(i));
    auto addArgument = [&](Type type, DictionaryAttr attrs) {
      argTypes.push_back(type);
      argAttrs.push_back(attrs);
      return body.addArgument(type, loc);
    };
    auto stateAttrs = [&](unsigned param, StringRef role) {
      return builder.getDictionaryAttr({
          builder.getNamedAttr(GraphDialect::kRoleAttrName,
                               builder.getStringAttr(role)),
          builder.getNamedAttr(
              GraphDialect::kParamNameAttrName,
              argAttrs[param].get(GraphDialect::kParamNameAttrName)),
          builder.getNamedAttr(GraphDialect::kInitAttrName,
                               builder.getStringAttr("zeros")),
      });
    };
    auto updates = [&](unsigned argument) {
      return builder.getDictionaryAttr({builder.getNamedAttr(
          GraphDialect::kUpdatesAttrName, builder.getI64IntegerAttr(argument))});
    };

    builder.setInsertionPoint(terminator);
    SmallVector<Value> results = {terminator->getOperand(0)};
    // A dynamically scaled loss (role loss_scale): the gradients and the
    // reported loss are divided by the scale again.
    for (BlockArgument argument : body.getArguments()) {
      auto role = step.getArgAttrOfType<StringAttr>(
          argument.getArgNumber(), GraphDialect::kRoleAttrName);
      if (!role || role.getValue() != "loss_scale")
        continue;
      results[0] = DivOp::create(builder, loc, results[0], argument);
      for (auto &[param, gradient] : gradients)
        gradient = DivOp::create(builder, loc, gradient, argument);
    }
    SmallVector<DictionaryAttr> resultAttrs = {builder.getDictionaryAttr({})};
    // Weight decay by role: 1-D parameters (biases, norm gains) get none
    // unless asked for. The rank is the weight file's (a fused QKV bias
    // held as [3, E] is GPT-2's [3E] bias), as PyTorch's groups see it.
    auto decayOf = [&](unsigned param) {
      int64_t rank = llvm::cast<RankedTensorType>(argTypes[param]).getRank();
      if (auto fileShape = step.getArgAttrOfType<DenseI64ArrayAttr>(
              param, GraphDialect::kFileShapeAttrName))
        rank = fileShape.size();
      bool oneDimensional = rank <= 1;
      return builder.getF64FloatAttr(
          oneDimensional && !decayOneDimensional ? 0.0 : weightDecay.getValue());
    };
    if (optimizer == OptimizerKind::Sgd) {
      for (auto [param, gradient] : gradients) {
        results.push_back(SgdOp::create(builder, loc, body.getArgument(param),
                                        gradient, /*grad_scale=*/Value(),
                                        builder.getF64FloatAttr(learningRate),
                                        decayOf(param)));
        resultAttrs.push_back(updates(param));
      }
    } else {
      SmallVector<Value> firstMoments, secondMoments;
      SmallVector<unsigned> firstIndices, secondIndices;
      for (auto [param, gradient] : gradients) {
        firstIndices.push_back(argTypes.size());
        firstMoments.push_back(
            addArgument(argTypes[param], stateAttrs(param, "adam_m")));
      }
      for (auto [param, gradient] : gradients) {
        secondIndices.push_back(argTypes.size());
        secondMoments.push_back(
            addArgument(argTypes[param], stateAttrs(param, "adam_v")));
      }
      Value stepCount = addArgument(
          RankedTensorType::get({}, builder.getF32Type()),
          builder.getDictionaryAttr({builder.getNamedAttr(
              GraphDialect::kRoleAttrName, builder.getStringAttr("step"))}));
      SmallVector<Value> newParams, newFirst, newSecond;
      for (auto [i, entry] : llvm::enumerate(gradients)) {
        auto update = AdamWOp::create(
            builder, loc, body.getArgument(entry.first), entry.second,
            firstMoments[i], secondMoments[i], stepCount,
            /*grad_scale=*/Value(), builder.getF64FloatAttr(learningRate),
            builder.getF64FloatAttr(beta1), builder.getF64FloatAttr(beta2),
            builder.getF64FloatAttr(epsilon), decayOf(entry.first),
            /*lr_schedule=*/nullptr, /*warmup_steps=*/nullptr,
            /*decay_steps=*/nullptr, /*wsd_decay_steps=*/nullptr,
            /*min_lr=*/nullptr);
        // The schedule's rate at each step, from the step count.
        if (!lrSchedule.empty()) {
          update.setLrScheduleAttr(builder.getStringAttr(lrSchedule));
          update.setWarmupStepsAttr(builder.getI64IntegerAttr(warmupSteps));
          update.setDecayStepsAttr(builder.getI64IntegerAttr(decaySteps));
          update.setWsdDecayStepsAttr(
              builder.getI64IntegerAttr(wsdDecaySteps));
          update.setMinLrAttr(builder.getF64FloatAttr(minLearningRate));
        }
        newParams.push_back(update.getNewParam());
        newFirst.push_back(update.getNewFirstMoment());
        newSecond.push_back(update.getNewSecondMoment());
      }
      for (auto [i, entry] : llvm::enumerate(gradients)) {
        results.push_back(newParams[i]);
        resultAttrs.push_back(updates(entry.first));
      }
      for (auto [i, index] : llvm::enumerate(firstIndices)) {
        results.push_back(newFirst[i]);
        resultAttrs.push_back(updates(index));
      }
      for (auto [i, index] : llvm::enumerate(secondIndices)) {
        results.push_back(newSecond[i]);
        resultAttrs.push_back(updates(index));
      }
    }
    terminator->setOperands(results);
    SmallVector<Type> resultTypes;
    for (Value result : results)
      resultTypes.push_back(result.getType());
    step.setType(builder.getFunctionType(argTypes, resultTypes));
    step.setAllArgAttrs(argAttrs);
    step.setAllResultAttrs(resultAttrs);
    step.setSymName("train_step");
  }
};

} // namespace
