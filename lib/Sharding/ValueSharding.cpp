//===- ValueSharding.cpp - Shardings as mutable values --------------------===//

#include "ValueSharding.h"

using namespace mlir;

namespace trellis::sharding {

ValueSharding ValueSharding::fromAttr(ShardingAttr attr) {
  ValueSharding sharding;
  for (DimShardingAttr dim : attr.getDims())
    sharding.dims.emplace_back(dim.getAxes().begin(), dim.getAxes().end());
  sharding.partial.assign(attr.getPartialAxes().begin(),
                          attr.getPartialAxes().end());
  sharding.partialKind = attr.getPartialKind();
  return sharding;
}

ShardingAttr ValueSharding::toAttr(MLIRContext *context,
                                   FlatSymbolRefAttr mesh) const {
  SmallVector<DimShardingAttr> dimAttrs;
  for (const AxisNames &axes : dims)
    dimAttrs.push_back(DimShardingAttr::get(context, axes, /*isOpen=*/false));
  return ShardingAttr::get(context, mesh, dimAttrs, partial,
                           partial.empty() ? ReductionKind::Sum : partialKind);
}

bool ValueSharding::usesAxis(StringAttr axis) const {
  if (llvm::is_contained(partial, axis))
    return true;
  return llvm::any_of(dims, [&](const AxisNames &axes) {
    return llvm::is_contained(axes, axis);
  });
}

bool ValueSharding::isReplicated() const {
  return partial.empty() &&
         llvm::all_of(dims, [](const AxisNames &axes) { return axes.empty(); });
}

int64_t axesSize(MeshAttr mesh, ArrayRef<StringAttr> axes) {
  int64_t size = 1;
  for (StringAttr axis : axes)
    size *= mesh.getAxes()[*mesh.getAxisIndex(axis.getValue())].getSize();
  return size;
}

SmallVector<int64_t> localShape(MeshAttr mesh, ArrayRef<int64_t> globalShape,
                                const ValueSharding &sharding) {
  SmallVector<int64_t> shape(globalShape);
  for (size_t d = 0; d < shape.size() && d < sharding.dims.size(); ++d) {
    int64_t pieces = axesSize(mesh, sharding.dims[d]);
    shape[d] = (shape[d] + pieces - 1) / pieces; // the last pieces padded
  }
  return shape;
}

SmallVector<AxisNames> resolveFactors(const graph::ShardingRule &rule,
                                      ArrayRef<const ValueSharding *> tensors,
                                      MeshAttr mesh) {
  SmallVector<AxisNames> factorAxes(rule.factorSizes.size());
  auto visit = [&](ArrayRef<int64_t> factors, const ValueSharding *sharding) {
    if (!sharding)
      return;
    for (auto [d, factor] : llvm::enumerate(factors)) {
      if (factor == graph::ShardingRule::kNoFactor ||
          d >= sharding->dims.size() || sharding->dims[d].empty() ||
          rule.factorKinds[factor] == graph::FactorKind::Whole)
        continue;
      const AxisNames &axes = sharding->dims[d];
      // A factor already split takes a later tensor's axes only where they
      // extend its own (["tp"] then ["tp", "dp"]: the finer split).
      AxisNames &current = factorAxes[factor];
      if (!current.empty() &&
          (axes.size() <= current.size() ||
           !std::equal(current.begin(), current.end(), axes.begin())))
        continue;
      if (rule.factorSizes[factor] % axesSize(mesh, axes) != 0 &&
          !(rule.paddable && axes.size() == 1))
        continue;
      bool taken = llvm::any_of(
          ArrayRef<StringAttr>(axes).drop_front(current.size()),
          [&](StringAttr axis) {
            return llvm::any_of(factorAxes, [&](const AxisNames &other) {
              return llvm::is_contained(other, axis);
            });
          });
      if (!taken)
        current = axes;
    }
  };
  size_t numOperands = rule.operandFactors.size();
  for (auto [i, factors] : llvm::enumerate(rule.operandFactors))
    visit(factors, i < tensors.size() ? tensors[i] : nullptr);
  for (auto [i, factors] : llvm::enumerate(rule.resultFactors))
    visit(factors, numOperands + i < tensors.size() ? tensors[numOperands + i]
                                                    : nullptr);
  return factorAxes;
}

ValueSharding projectFactors(ArrayRef<int64_t> factors,
                             ArrayRef<AxisNames> factorAxes) {
  ValueSharding sharding = ValueSharding::replicated(factors.size());
  for (auto [d, factor] : llvm::enumerate(factors))
    if (factor != graph::ShardingRule::kNoFactor)
      sharding.dims[d] = factorAxes[factor];
  return sharding;
}

AxisNames partialAxes(const graph::ShardingRule &rule,
                      ArrayRef<AxisNames> factorAxes, size_t resultIndex) {
  AxisNames partial;
  ArrayRef<int64_t> resultFactors = rule.resultFactors[resultIndex];
  for (size_t factor = 0; factor < factorAxes.size(); ++factor) {
    // A collective factor's op combines the split itself.
    if (factorAxes[factor].empty() ||
        rule.factorKinds[factor] == graph::FactorKind::Collective ||
        llvm::is_contained(resultFactors, static_cast<int64_t>(factor)))
      continue;
    bool inOperand = llvm::any_of(rule.operandFactors, [&](const auto &dims) {
      return llvm::is_contained(dims, static_cast<int64_t>(factor));
    });
    if (inOperand)
      partial.append(factorAxes[factor].begin(), factorAxes[factor].end());
  }
  return partial;
}

AxisNames inheritedPartial(const graph::ShardingRule &rule,
                           ArrayRef<const ValueSharding *> operands) {
  if (rule.linearOperand >= 0) {
    size_t index = rule.linearOperand;
    if (index >= operands.size() || !operands[index] ||
        operands[index]->partialKind != ReductionKind::Sum)
      return {};
    return operands[index]->partial;
  }
  if (!rule.linear || operands.empty() || !operands[0])
    return {};
  const AxisNames &first = operands[0]->partial;
  for (const ValueSharding *operand : operands)
    if (!operand || operand->partial != first ||
        operand->partialKind != ReductionKind::Sum)
      return {};
  return first;
}

void setResultPartial(const graph::ShardingRule &rule,
                      ArrayRef<AxisNames> factorAxes,
                      const AxisNames &inherited, size_t resultIndex,
                      ValueSharding &result) {
  AxisNames candidates = partialAxes(rule, factorAxes, resultIndex);
  for (StringAttr axis : inherited)
    if (!llvm::is_contained(candidates, axis))
      candidates.push_back(axis);
  result.partial.clear();
  for (StringAttr axis : candidates)
    if (!result.usesAxis(axis))
      result.partial.push_back(axis);
  result.partialKind =
      rule.partialIsMax ? ReductionKind::Max : ReductionKind::Sum;
}

} // namespace trellis::sharding
