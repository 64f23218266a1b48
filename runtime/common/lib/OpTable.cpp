//===- OpTable.cpp - The plan op table: builder and shared checks ---------===//

#include "OpTable.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace trellis {
namespace optable {

const OperandSpec kInput{"input", OperandKind::Float};
const OperandSpec kAnyInput{"input", OperandKind::Any};
const AttrSpec kOptionalAxes{"axes", AttrKind::Strings, false};
const AttrSpec kChunks{"chunks", AttrKind::Int, false};

Row &Row::factors(FactorRule rule) {
  contract_.factors = std::move(rule);
  return *this;
}

Row &Row::flopsPerElement(double flops) {
  contract_.cost = [flops](const OpInstance &op) {
    return elementwiseCost(op, flops);
  };
  return *this;
}

Row &Row::cost(CostRule rule) {
  contract_.cost = std::move(rule);
  return *this;
}

Row &Row::precision(PrecisionPolicy policy) {
  contract_.precision = policy;
  return *this;
}

Row &Row::variadic() {
  contract_.variadic = true;
  return *this;
}

Row &Row::effects(OpEffects effects) {
  contract_.effects = std::move(effects);
  return *this;
}

Row &Row::member(int member) {
  contract_.member = member;
  return *this;
}

Row &Row::computeClass(ComputeClass computeClass) {
  contract_.computeClass = computeClass;
  return *this;
}

Row &Row::fusible() {
  contract_.fusible = true;
  return *this;
}

Row &Row::gradient() {
  contract_.gradient = true;
  return *this;
}

Row &Row::optionalResults(size_t count) {
  contract_.optionalResults = count;
  return *this;
}

Row TableBuilder::add(const std::string &name,
                      std::vector<OperandSpec> operands, size_t results,
                      std::vector<AttrSpec> attrs, ShapeRule rule) {
  auto contract = std::make_unique<OpContract>();
  contract->id = static_cast<OpId>(rows_.size());
  contract->name = name;
  contract->operands = std::move(operands);
  contract->results = results;
  contract->attrs = std::move(attrs);
  contract->rule = std::move(rule);
  contract->family = family_;
  contract->parameters = parameters_;
  contract->computeClass = family_ == OpFamily::Matmul ? ComputeClass::Gemm
                           : family_ == OpFamily::Attention
                               ? ComputeClass::Attention
                               : ComputeClass::MemoryBound;
  rows_.push_back(std::move(contract));
  return Row(*rows_.back()).flopsPerElement(1);
}

Row TableBuilder::addCollective(const std::string &name,
                                std::vector<OperandSpec> operands,
                                size_t results, std::vector<AttrSpec> attrs,
                                ShapeRule rule) {
  attrs.insert(attrs.begin(), {"axes", AttrKind::Strings, true});
  Row row = add(name, std::move(operands), results, std::move(attrs),
                [rule](const OpInstance &op, Results &out) -> Diagnostic {
                  if (op.numAxes() == 0)
                    return std::string("expected at least one mesh axis");
                  return rule(op, out);
                });
  OpContract &contract = row.contract();
  contract.collective = true;
  CollectiveKind kind;
  if (!findCollectiveKind(name, kind)) {
    std::fprintf(stderr, "op table: collective '%s' is no CollectiveKind\n",
                 name.c_str());
    std::abort();
  }
  contract.family =
      isPointToPoint(kind) ? OpFamily::PointToPoint : OpFamily::Collective;
  contract.member = static_cast<int>(kind);
  contract.computeClass = ComputeClass::Communication;
  return row.flopsPerElement(0);
}

std::vector<OpContract> TableBuilder::take() {
  std::vector<OpContract> table;
  for (std::unique_ptr<OpContract> &row : rows_)
    table.push_back(std::move(*row));
  rows_.clear();
  return table;
}

std::string text(int64_t value) { return std::to_string(value); }

Diagnostic expectRank(const OpInstance &op, size_t i, const std::string &name,
                      size_t rank) {
  if (op.shape(i).size() == rank)
    return std::nullopt;
  return "expected " + name + " of rank " + text(rank) + ", found shape " +
         formatShape(op.shape(i));
}

Diagnostic expectSameShape(const OpInstance &op, size_t i,
                           const std::string &name, size_t reference,
                           const std::string &referenceName) {
  if (op.shape(i) == op.shape(reference))
    return std::nullopt;
  return "expected " + name + " to have the shape of " + referenceName + " " +
         formatShape(op.shape(reference)) + ", found " +
         formatShape(op.shape(i));
}

Diagnostic expectFeatureVector(const OpInstance &op, size_t i,
                               const std::string &name) {
  int64_t features = op.shape(0).back();
  if (op.shape(i) == Shape{features})
    return std::nullopt;
  return "expected " + name + " of shape [" + text(features) +
         "] (the last dimension of the input), found " +
         formatShape(op.shape(i));
}

Diagnostic expectPositive(const OpInstance &op, const std::string &name) {
  double value = op.real(name);
  if (value > 0)
    return std::nullopt;
  char found[32];
  std::snprintf(found, sizeof(found), "%g", value);
  return "expected " + name + " > 0, found " + found;
}

TensorType f32(Shape shape) { return {std::move(shape), ElementType::F32}; }

TensorType like(const OpInstance &op, size_t i, Shape shape) {
  return {std::move(shape), op.input(i).element};
}

Diagnostic sameAsInputRule(const OpInstance &op, Results &results) {
  results.push_back(op.input(0));
  return std::nullopt;
}

ShardingRule elementwiseFactors(const OpInstance &op) {
  ShardingRule rule;
  const Shape &shape = op.resultShape(0);
  std::vector<int64_t> factors = rule.addFactors(shape, FactorKind::Parallel);
  for (size_t i = 0; i < op.numInputs(); ++i) {
    const Shape &operandShape = op.shape(i);
    size_t lead = shape.size() - operandShape.size();
    std::vector<int64_t> dims;
    for (size_t d = 0; d < operandShape.size(); ++d)
      dims.push_back(operandShape[d] == shape[lead + d]
                         ? factors[lead + d]
                         : ShardingRule::kNoFactor);
    rule.operandFactors.push_back(dims);
  }
  rule.resultFactors.push_back(factors);
  return rule;
}

std::vector<int64_t> addRowFactors(ShardingRule &rule, const Shape &shape) {
  std::vector<int64_t> factors;
  for (size_t d = 0; d < shape.size(); ++d)
    factors.push_back(rule.addFactor(shape[d], d + 1 == shape.size()
                                                   ? FactorKind::Whole
                                                   : FactorKind::Parallel));
  return factors;
}

namespace {

ShardingRule resultFactorsOfKind(const OpInstance &op, FactorKind kind) {
  ShardingRule rule;
  rule.resultFactors.push_back(rule.addFactors(op.resultShape(0), kind));
  return rule;
}

} // namespace

ShardingRule resultFactors(const OpInstance &op) {
  return resultFactorsOfKind(op, FactorKind::Parallel);
}

ShardingRule wholeResultFactors(const OpInstance &op) {
  return resultFactorsOfKind(op, FactorKind::Whole);
}

ShardingRule rowwiseFactors(const OpInstance &op) {
  ShardingRule rule;
  std::vector<int64_t> factors = addRowFactors(rule, op.shape(0));
  rule.operandFactors.assign(op.numInputs(), factors);
  rule.resultFactors.assign(op.numResults(), factors);
  return rule;
}

} // namespace optable

std::vector<OpContract> buildOpContracts() {
  optable::TableBuilder table;
  optable::addPointwiseOps(table);
  optable::addShapeOps(table);
  optable::addLayerOps(table);
  optable::addAttentionOps(table);
  optable::addExpertOps(table);
  optable::addOptimizerOps(table);
  optable::addCollectiveOps(table);
  return table.take();
}

} // namespace trellis
