//===- OptimizerOps.cpp - Rows of the optimizer updates -------------------===//
//
// Updates are elementwise over the parameter (the step is a scalar): each
// result is the new value of one operand, which the memory plan may update
// in place, and a piece may be padded with zeros (they stay finite). An
// update with a grad_scale (a scalar, its last operand) reads the gradient
// divided by it, and leaves its operands' values unchanged when it is not
// finite (OpEffects::gradientScaleOperand).
//
//===----------------------------------------------------------------------===//

#include "../OpTable.h"
#include "trellis/Common/LearningRate.h"

#include <cstdio>

namespace trellis::optable {

namespace {

/// Parallel over the parameter's dimensions; scalar operands take none.
ShardingRule updateFactors(const OpInstance &op) {
  ShardingRule rule;
  std::vector<int64_t> factors =
      rule.addFactors(op.shape(0), FactorKind::Parallel);
  for (size_t i = 0; i < op.numInputs(); ++i)
    rule.operandFactors.push_back(op.shape(i).empty() ? std::vector<int64_t>{}
                                                      : factors);
  rule.resultFactors.assign(op.numResults(), factors);
  rule.paddable = true;
  return rule;
}

/// An update's optional gradient scale (its last operand when present): a
/// scalar.
Diagnostic gradientScaleOperand(const OpInstance &op, size_t index) {
  if (op.numInputs() <= index || op.shape(index).empty())
    return std::nullopt;
  return "expected a scalar grad_scale, found " + formatShape(op.shape(index));
}

/// `flops` per parameter element.
CostRule perParameterElement(double flops) {
  return [flops](const OpInstance &op) {
    OpCost cost = elementwiseCost(op, 0);
    cost.flops = flops * elementCount(op.shape(0));
    return cost;
  };
}

OpParameters optimizerParameters(const OpInstance &op) {
  OptimizerParameters parameters;
  parameters.learningRate = op.real("learning_rate");
  parameters.weightDecay = op.real("weight_decay");
  parameters.beta1 = op.real("beta1");
  parameters.beta2 = op.real("beta2");
  parameters.epsilon = op.real("epsilon");
  parameters.schedule = lrScheduleFromAttributes(op);
  return parameters;
}

} // namespace

void addOptimizerOps(TableBuilder &table) {
  using K = AttrKind;
  table.family(OpFamily::Optimizer, optimizerParameters);
  OpEffects adamw;
  adamw.replaces = {0, 2, 3}; // param, first_moment, second_moment
  adamw.gradientOperand = 1;
  adamw.gradientScaleOperand = 5;
  table
      .add("adamw",
           {{"param", OperandKind::Float32},
            {"grad", OperandKind::Float32},
            {"first_moment", OperandKind::Float32},
            {"second_moment", OperandKind::Float32},
            {"step", OperandKind::Float32},
            {"grad_scale", OperandKind::Float32, /*optional=*/true}},
           3,
           {{"learning_rate", K::Real, true},
            {"beta1", K::Real, true},
            {"beta2", K::Real, true},
            {"epsilon", K::Real, true},
            {"weight_decay", K::Real, true},
            // A schedule: the rate of each step from the step count
            // (trellis/Common/LearningRate.h); learning_rate is its peak.
            {"lr_schedule", K::String, false},
            {"warmup_steps", K::Int, false},
            {"decay_steps", K::Int, false},
            {"wsd_decay_steps", K::Int, false},
            {"min_lr", K::Real, false}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(expectSameShape(op, 1, "grad", 0, "param"));
             TRELLIS_CHECK(expectSameShape(op, 2, "first_moment", 0, "param"));
             TRELLIS_CHECK(expectSameShape(op, 3, "second_moment", 0, "param"));
             if (!op.shape(4).empty())
               return "expected a scalar step, found " +
                      formatShape(op.shape(4));
             TRELLIS_CHECK(gradientScaleOperand(op, 5));
             double beta1 = op.real("beta1"), beta2 = op.real("beta2");
             if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) {
               char found[64];
               std::snprintf(found, sizeof(found), "%g and %g", beta1, beta2);
               return std::string("expected betas in [0, 1), found ") + found;
             }
             TRELLIS_CHECK(expectPositive(op, "epsilon"));
             if (op.has("lr_schedule")) {
               std::optional<LrSchedule> schedule =
                   lrScheduleFromAttributes(op);
               if (!schedule)
                 return "expected lr_schedule constant, linear, cosine or "
                        "wsd, found '" +
                        op.text("lr_schedule") + "'";
               if (std::string invalid = checkLrSchedule(*schedule);
                   !invalid.empty())
                 return invalid;
             }
             out.assign(3, op.input(0));
             return std::nullopt;
           })
      .member(OptimizerKind::AdamW)
      .factors(updateFactors)
      .cost(perParameterElement(12))
      .effects(adamw);

  OpEffects sgd;
  sgd.replaces = {0};
  sgd.gradientOperand = 1;
  sgd.gradientScaleOperand = 2;
  table
      .add("sgd",
           {{"param", OperandKind::Float32},
            {"grad", OperandKind::Float32},
            {"grad_scale", OperandKind::Float32, /*optional=*/true}},
           1,
           {{"learning_rate", K::Real, true}, {"weight_decay", K::Real, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             TRELLIS_CHECK(expectSameShape(op, 1, "grad", 0, "param"));
             TRELLIS_CHECK(gradientScaleOperand(op, 2));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .member(OptimizerKind::Sgd)
      .factors(updateFactors)
      .cost(perParameterElement(3))
      .effects(sgd);
}

} // namespace trellis::optable
