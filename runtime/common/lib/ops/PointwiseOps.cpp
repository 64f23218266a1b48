//===- PointwiseOps.cpp - Rows of constants and elementwise ops -----------===//
//
// Binary ops broadcast as NumPy does; unary ops, scale, casts and
// accumulation keep their input's shape. All are elementwise over their
// result: one parallel factor per result dimension.
//
//===----------------------------------------------------------------------===//

#include "../OpTable.h"

#include "trellis/Common/FusedProgram.h"

namespace trellis::optable {

namespace {

Diagnostic binaryRule(const OpInstance &op, Results &results) {
  std::optional<Shape> shape = broadcastShapes(op.shape(0), op.shape(1));
  if (!shape)
    return "operands of shapes " + formatShape(op.shape(0)) + " and " +
           formatShape(op.shape(1)) + " do not broadcast";
  results.push_back(like(op, 0, *shape));
  return std::nullopt;
}

/// Elementwise and linear in its operands jointly: partial sums pass
/// through.
ShardingRule linearElementwiseFactors(const OpInstance &op) {
  ShardingRule rule = elementwiseFactors(op);
  rule.linear = true;
  return rule;
}

OpParameters fillParameters(const OpInstance &op) {
  FillParameters parameters;
  parameters.value = op.real("value");
  if (op.has("values"))
    parameters.values = op.reals("values");
  return parameters;
}

OpParameters unaryGradParameters(const OpInstance &op) {
  return UnaryGradParameters{parseUnaryFunction(op.text("function").c_str())};
}

OpParameters scaleParameters(const OpInstance &op) {
  return ScaleParameters{op.real("factor")};
}

OpParameters accumulateParameters(const OpInstance &op) {
  return AccumulateParameters{op.flag("first")};
}

OpParameters fusedElementwiseParameters(const OpInstance &op) {
  return FusedElementwiseParameters{op.texts("program")};
}

} // namespace

void addPointwiseOps(TableBuilder &table) {
  using K = AttrKind;
  table.family(OpFamily::Fill, fillParameters);
  table
      .add("fill", {}, 1, {{"shape", K::Ints, true}, {"value", K::Real, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             Shape shape = op.ints("shape");
             for (int64_t size : shape)
               if (size < 0)
                 return "expected sizes >= 0, found " + formatShape(shape);
             out.push_back(f32(shape));
             return std::nullopt;
           })
      .factors(resultFactors)
      .flopsPerElement(0);
  table
      .add("constant", {}, 1,
           {{"shape", K::Ints, true}, {"values", K::Reals, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             Shape shape = op.ints("shape");
             int64_t count = 1;
             for (int64_t size : shape) {
               if (size < 0)
                 return "expected sizes >= 0, found " + formatShape(shape);
               count *= size;
             }
             int64_t values = static_cast<int64_t>(op.reals("values").size());
             if (values != count)
               return "expected " + text(count) + " values (shape " +
                      formatShape(shape) + "), found " + text(values);
             if (count > kMaxConstantValues)
               return "expected at most " + text(kMaxConstantValues) +
                      " values in a constant (larger ones are parameters or "
                      "states), found " +
                      text(count);
             out.push_back(f32(shape));
             return std::nullopt;
           })
      .factors(wholeResultFactors)
      .flopsPerElement(0);

  // The binary family (trellis/Common/BinaryFunctions.h).
  table.family(OpFamily::Binary);
  for (BinaryFunction function : kBinaryFunctions) {
    Row row = table
                  .add(binaryFunctionName(function), {{"lhs"}, {"rhs"}}, 1, {},
                       binaryRule)
                  .factors(isLinearBinary(function) ? linearElementwiseFactors
                                                    : elementwiseFactors)
                  .member(static_cast<int>(function));
    if (isFusibleBinary(function))
      row.fusible();
  }

  // The unary family (trellis/Common/UnaryFunctions.h).
  table.family(OpFamily::Unary);
  for (UnaryFunction function : kUnaryFunctions)
    table.add(unaryFunctionName(function), {kInput}, 1, {}, sameAsInputRule)
        .factors(isLinearUnary(function) ? linearElementwiseFactors
                                         : elementwiseFactors)
        .member(static_cast<int>(function))
        .fusible();
  table.family(OpFamily::UnaryGrad, unaryGradParameters);
  table
      .add("unary_grad", {kInput, {"result_grad"}}, 1,
           {{"function", K::String, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             if (!isUnaryFunction(op.text("function")))
               return "unknown function '" + op.text("function") + "'";
             TRELLIS_CHECK(expectSameShape(op, 1, "result_grad", 0, "input"));
             out.push_back(op.input(0));
             return std::nullopt;
           })
      .gradient()
      .factors(elementwiseFactors)
      .fusible();

  table.family(OpFamily::Scale, scaleParameters);
  table.add("scale", {kInput}, 1, {{"factor", K::Real, true}}, sameAsInputRule)
      .factors(linearElementwiseFactors)
      .fusible();
  // Linear, unless the compiler marks it to take reduced values
  // (graph.reduce_first); zeros cast to zeros, so pieces may be padded.
  table.family(OpFamily::Cast);
  table
      .add("cast", {kInput}, 1, {{"to", K::String, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             std::string to = op.text("to");
             for (ElementType type :
                  {ElementType::F32, ElementType::BF16, ElementType::F16})
               if (to == elementTypeName(type)) {
                 out.push_back({op.shape(0), type});
                 return std::nullopt;
               }
             return "expected a cast to f32, bf16 or f16, found '" + to + "'";
           })
      .factors([](const OpInstance &op) {
        ShardingRule rule = linearElementwiseFactors(op);
        rule.paddable = true;
        return rule;
      })
      .precision(PrecisionPolicy::Operands)
      .fusible();
  // A micro-batch's value added into its step total (the compiler's
  // graph.microbatch_sum); the runtime sets `first` on each total's first
  // accumulation of the step (which copies). Zeros sum to zeros, so pieces
  // may be padded (ZeRO-2's gradient pieces of a dimension the data axis
  // does not divide).
  OpEffects accumulates;
  accumulates.accumulates = true;
  table.family(OpFamily::Accumulate, accumulateParameters);
  table
      .add("accumulate", {kInput}, 1, {{"first", K::Bool, false}},
           sameAsInputRule)
      .factors([](const OpInstance &op) {
        ShardingRule rule = linearElementwiseFactors(op);
        rule.paddable = true;
        return rule;
      })
      .effects(accumulates);

  // Elementwise chains fused into one pass (trellis/Common/FusedProgram.h):
  // the inputs broadcast to the result; its dtype is the program's last
  // slot's. Its members' flops (one per element each); the bytes of its
  // inputs and result alone: the intermediates never reach memory.
  table.family(OpFamily::FusedElementwise, fusedElementwiseParameters);
  table
      .add("fused_elementwise", {kAnyInput}, 1, {{"program", K::Strings, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             std::vector<ElementType> types;
             Shape shape = op.shape(0);
             for (size_t i = 0; i < op.numInputs(); ++i) {
               types.push_back(op.input(i).element);
               std::optional<Shape> joined =
                   broadcastShapes(shape, op.shape(i));
               if (!joined)
                 return "expected inputs that broadcast together, found " +
                        formatShape(shape) + " and " + formatShape(op.shape(i));
               shape = *joined;
             }
             FusedProgram program;
             TRELLIS_CHECK(
                 parseFusedProgram(op.texts("program"), types, program));
             out.push_back({shape, program.resultType()});
             return std::nullopt;
           })
      .variadic()
      .factors(elementwiseFactors)
      .cost([](const OpInstance &op) {
        return elementwiseCost(op,
                               static_cast<double>(op.texts("program").size()));
      });
}

} // namespace trellis::optable
