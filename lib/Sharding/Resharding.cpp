//===- Resharding.cpp - The partitioner's decisions, as data --------------===//

#include "Resharding.h"

using namespace mlir;

namespace trellis::sharding {

OpLayout decideOpLayout(const graph::ShardingRule &rule,
                        ArrayRef<ValueSharding> operands, ArrayRef<bool> fixed,
                        ArrayRef<ValueSharding> results, MeshAttr mesh) {
  SmallVector<const ValueSharding *> known;
  for (const ValueSharding &sharding : operands)
    known.push_back(&sharding);
  for (const ValueSharding &sharding : results)
    known.push_back(&sharding);
  // Results first: the decision already made wins over operand layouts.
  SmallVector<const ValueSharding *> resultsFirst(
      known.begin() + operands.size(), known.end());
  graph::ShardingRule resultsOnly = rule;
  resultsOnly.operandFactors.clear();
  OpLayout layout;
  SmallVector<AxisNames> &factorAxes = layout.factorAxes;
  factorAxes = resolveFactors(resultsOnly, resultsFirst, mesh);
  // Operands fixed by the user or a preset decide first, as in
  // propagation; the others fill what is left.
  SmallVector<const ValueSharding *> fixedOperands(known.size(), nullptr);
  for (size_t i = 0; i < operands.size(); ++i)
    if (i < fixed.size() && fixed[i])
      fixedOperands[i] = known[i];
  SmallVector<AxisNames> fromFixed = resolveFactors(rule, fixedOperands, mesh);
  SmallVector<AxisNames> fromOperands = resolveFactors(rule, known, mesh);
  for (auto [factor, axes] : llvm::enumerate(factorAxes))
    if (axes.empty() &&
        llvm::none_of(rule.resultFactors, [&](const auto &dims) {
          return llvm::is_contained(dims, static_cast<int64_t>(factor));
        })) {
      const AxisNames &wanted =
          fromFixed[factor].empty() ? fromOperands[factor] : fromFixed[factor];
      for (StringAttr axis : wanted) {
        bool taken = llvm::any_of(factorAxes, [&](const AxisNames &other) {
          return llvm::is_contained(other, axis);
        });
        if (taken)
          break;
        axes.push_back(axis);
      }
    }

  // A linear op whose result stays partial takes its operands partial too.
  AxisNames keptPartial;
  if (!results.empty())
    for (StringAttr axis : inheritedPartial(
             rule, ArrayRef<const ValueSharding *>(known).take_front(
                       operands.size())))
      if (llvm::is_contained(results[0].partial, axis))
        keptPartial.push_back(axis);

  for (size_t i = 0; i < operands.size(); ++i) {
    ValueSharding required = projectFactors(rule.operandFactors[i], factorAxes);
    layout.operandSplits.push_back(required);
    if (rule.linearOperand < 0 || static_cast<int64_t>(i) == rule.linearOperand)
      required.partial = keptPartial;
    layout.operands.push_back(std::move(required));
  }
  // What the op produces is what its rule implies from the factors.
  for (size_t i = 0; i < rule.resultFactors.size(); ++i) {
    ValueSharding sharding = projectFactors(rule.resultFactors[i], factorAxes);
    setResultPartial(rule, factorAxes, keptPartial, i, sharding);
    layout.results.push_back(std::move(sharding));
  }
  return layout;
}

ValueSharding achievedSharding(const ValueSharding &made,
                               const ValueSharding &wanted) {
  ValueSharding achieved = wanted;
  achieved.partial.clear();
  for (StringAttr axis : wanted.partial)
    if (llvm::is_contained(made.partial, axis))
      achieved.partial.push_back(axis);
  return achieved;
}

SmallVector<ReshardStep> planReshard(MeshAttr mesh, ArrayRef<int64_t> local,
                                     ValueSharding actual,
                                     const ValueSharding &required,
                                     ArrayRef<int64_t> global) {
  using Kind = ReshardStep::Kind;
  SmallVector<ReshardStep> steps;
  SmallVector<int64_t> shape(local);
  auto add = [&](Kind kind, AxisNames axes, int64_t dim) -> ReshardStep & {
    steps.push_back({kind, std::move(axes), dim, 0, ReductionKind::Sum, {}});
    return steps.back();
  };
  // Dimension `d` (whole here) padded with zeros up to a multiple of
  // `pieces`, and cut back to `size`.
  auto padFor = [&](size_t d, int64_t pieces) {
    int64_t padded = (shape[d] + pieces - 1) / pieces * pieces;
    if (padded == shape[d])
      return;
    shape[d] = padded;
    add(Kind::Pad, {}, d).shape = shape;
  };
  auto cutTo = [&](size_t d, int64_t size) {
    if (size == shape[d])
      return;
    shape[d] = size;
    add(Kind::Slice, {}, d).shape = shape;
  };
  // Whether dimension `d` is split over `axes` alone without dividing.
  auto uneven = [&](size_t d, const AxisNames &axes) {
    return axes.size() == 1 && d < global.size() &&
           global[d] % axesSize(mesh, axes) != 0;
  };
  auto isPrefix = [](const AxisNames &prefix, const AxisNames &of) {
    return prefix.size() <= of.size() &&
           std::equal(prefix.begin(), prefix.end(), of.begin());
  };
  // 1. Partial values. A partial value its user takes as it is (a linear
  //    op) stays partial.
  if (!actual.partial.empty() && actual.partial != required.partial) {
    AxisNames reduceAll, scatterAxes;
    SmallVector<int64_t> scatterDims;
    for (StringAttr axis : actual.partial) {
      bool scattered = false;
      for (size_t d = 0; d < shape.size() && !scattered; ++d) {
        AxisNames extended = actual.dims[d];
        extended.push_back(axis);
        if (extended == required.dims[d] &&
            (shape[d] % axesSize(mesh, {axis}) == 0 || uneven(d, extended))) {
          scatterAxes.push_back(axis);
          scatterDims.push_back(d);
          scattered = true;
        }
      }
      if (!scattered)
        reduceAll.push_back(axis);
    }
    if (!reduceAll.empty()) {
      ReshardStep &step = add(Kind::AllReduce, reduceAll, 0);
      step.reduction = actual.partialKind;
      step.shape = shape;
    }
    for (auto [axis, d] : llvm::zip(scatterAxes, scatterDims)) {
      padFor(d, axesSize(mesh, {axis}));
      shape[d] /= axesSize(mesh, {axis});
      ReshardStep &step = add(Kind::ReduceScatter, {axis}, d);
      step.reduction = actual.partialKind;
      step.shape = shape;
      actual.dims[d].push_back(axis);
    }
    actual.partial.clear();
  }
  // 2. Splits the requirement does not start with, minor axis first.
  for (size_t d = 0; d < shape.size(); ++d) {
    while (!isPrefix(actual.dims[d], required.dims[d])) {
      StringAttr axis = actual.dims[d].back();
      int64_t pieces = axesSize(mesh, {axis});
      std::optional<size_t> target;
      bool padded = uneven(d, actual.dims[d]);
      for (size_t e = 0; e < shape.size() && !target && !padded; ++e) {
        if (e == d)
          continue;
        AxisNames extended = actual.dims[e];
        extended.push_back(axis);
        if (isPrefix(extended, required.dims[e]) && shape[e] % pieces == 0)
          target = e;
      }
      if (target) {
        shape[*target] /= pieces;
        shape[d] *= pieces;
        ReshardStep &step = add(Kind::AllToAll, {axis}, *target);
        step.concatDim = d;
        step.shape = shape;
        actual.dims[*target].push_back(axis);
      } else {
        shape[d] *= pieces;
        add(Kind::AllGather, {axis}, d).shape = shape;
        if (padded)
          cutTo(d, global[d]);
      }
      actual.dims[d].pop_back();
    }
  }
  // 3. The splits still missing: each rank keeps its piece.
  for (size_t d = 0; d < shape.size(); ++d) {
    for (size_t k = actual.dims[d].size(); k < required.dims[d].size(); ++k) {
      StringAttr axis = required.dims[d][k];
      if (shape[d] % axesSize(mesh, {axis}) != 0)
        padFor(d, axesSize(mesh, {axis}));
      shape[d] /= axesSize(mesh, {axis});
      add(Kind::SliceShard, {axis}, d).shape = shape;
      actual.dims[d].push_back(axis);
    }
  }
  return steps;
}

} // namespace trellis::sharding
