//===- ShardingRule.cpp - Printing factor-based sharding rules ------------===//

#include "trellis/Common/ShardingRule.h"

namespace trellis {

const char *factorKindName(FactorKind kind) {
  switch (kind) {
  case FactorKind::Parallel:
    return "parallel";
  case FactorKind::Reduction:
    return "reduction";
  case FactorKind::Whole:
    return "whole";
  case FactorKind::Collective:
    return "collective";
  }
  return "?";
}

std::vector<int64_t> ShardingRule::addFactors(const std::vector<int64_t> &sizes,
                                              FactorKind kind) {
  std::vector<int64_t> factors;
  for (int64_t size : sizes)
    factors.push_back(addFactor(size, kind));
  return factors;
}

namespace {

void printTensors(const std::vector<std::vector<int64_t>> &tensors,
                  std::string &text) {
  text += "(";
  for (size_t t = 0; t < tensors.size(); ++t) {
    text += t ? ", [" : "[";
    for (size_t d = 0; d < tensors[t].size(); ++d) {
      int64_t factor = tensors[t][d];
      text += d ? ", " : "";
      text += factor == ShardingRule::kNoFactor ? std::string("_")
                                                : "f" + std::to_string(factor);
    }
    text += "]";
  }
  text += ")";
}

} // namespace

std::string ShardingRule::toString(bool withFlags) const {
  std::string text;
  printTensors(operandFactors, text);
  text += " -> ";
  printTensors(resultFactors, text);
  text += " {";
  for (size_t f = 0; f < factorSizes.size(); ++f)
    text += (f ? ", f" : "f") + std::to_string(f) + "=" +
            std::to_string(factorSizes[f]) + " " +
            factorKindName(factorKinds[f]);
  text += "}";
  if (!withFlags)
    return text;
  if (linear)
    text += " linear";
  if (linearOperand >= 0)
    text += " linear-in-operand-" + std::to_string(linearOperand);
  if (partialIsMax)
    text += " partial-max";
  if (paddable)
    text += " paddable";
  return text;
}

} // namespace trellis
