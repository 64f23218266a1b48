//===- ShapeOps.cpp - Rows of reductions, broadcasts and layout moves -----===//
//
// Reductions over listed dimensions; broadcast_to; and the layout ops,
// which move elements without arithmetic (no flops, only bytes).
//
//===----------------------------------------------------------------------===//

#include "../OpTable.h"

#include <algorithm>
#include <utility>

namespace trellis::optable {

namespace {

Diagnostic reduceRule(const OpInstance &op, Results &results) {
  const Shape &shape = op.shape(0);
  int64_t rank = shape.size();
  Shape dims = op.ints("dims");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= rank)
      return "expected reduced dimensions in [0, " + text(rank) + "), found " +
             text(dims[i]);
    if (i > 0 && dims[i - 1] >= dims[i])
      return "expected strictly increasing dimensions, found " +
             formatShape(dims);
  }
  bool keep = op.flag("keep_dims");
  Shape result;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      result.push_back(shape[d]);
    else if (keep)
      result.push_back(1);
  }
  results.push_back(like(op, 0, result));
  return std::nullopt;
}

/// Kept dimensions parallel; reduced ones `reducedKind`.
ShardingRule reduceFactors(const OpInstance &op, FactorKind reducedKind) {
  ShardingRule rule;
  Shape dims = op.ints("dims");
  bool keepDims = op.flag("keep_dims");
  std::vector<int64_t> inputFactors, resultFactors;
  const Shape &shape = op.shape(0);
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(),
                             static_cast<int64_t>(d)) != dims.end();
    int64_t factor =
        rule.addFactor(shape[d], reduced ? reducedKind : FactorKind::Parallel);
    inputFactors.push_back(factor);
    if (!reduced)
      resultFactors.push_back(factor);
    else if (keepDims)
      resultFactors.push_back(ShardingRule::kNoFactor);
  }
  rule.operandFactors.push_back(inputFactors);
  rule.resultFactors.push_back(resultFactors);
  return rule;
}

/// Groups of dimensions with equal products correspond. Within a group the
/// most major dimensions of both sides share one parallel factor when one
/// divides the other (splitting [B, S] -> [B*S] over B keeps contiguous
/// pieces); the other dimensions of a merged or split group stay whole.
ShardingRule reshapeFactors(const OpInstance &op) {
  ShardingRule rule;
  const Shape &from = op.shape(0), &to = op.resultShape(0);
  std::vector<int64_t> fromFactors(from.size(), ShardingRule::kNoFactor);
  std::vector<int64_t> toFactors(to.size(), ShardingRule::kNoFactor);
  size_t i = 0, j = 0;
  while (i < from.size() || j < to.size()) {
    // Size-1 dimensions take part in no factor.
    if (i < from.size() && from[i] == 1) {
      ++i;
      continue;
    }
    if (j < to.size() && to[j] == 1) {
      ++j;
      continue;
    }
    if (i == from.size() || j == to.size())
      break;
    size_t groupStartFrom = i, groupStartTo = j;
    int64_t fromProduct = from[i++], toProduct = to[j++];
    while (fromProduct != toProduct) {
      if (fromProduct < toProduct && i < from.size())
        fromProduct *= from[i++];
      else if (j < to.size())
        toProduct *= to[j++];
      else
        break;
    }
    int64_t majorFrom = from[groupStartFrom], majorTo = to[groupStartTo];
    if (majorFrom % majorTo == 0 || majorTo % majorFrom == 0) {
      int64_t shared =
          rule.addFactor(std::min(majorFrom, majorTo), FactorKind::Parallel);
      fromFactors[groupStartFrom] = shared;
      toFactors[groupStartTo] = shared;
    } else {
      fromFactors[groupStartFrom] =
          rule.addFactor(majorFrom, FactorKind::Whole);
      toFactors[groupStartTo] = rule.addFactor(majorTo, FactorKind::Whole);
    }
    for (size_t d = groupStartFrom + 1; d < i; ++d)
      if (from[d] != 1)
        fromFactors[d] = rule.addFactor(from[d], FactorKind::Whole);
    for (size_t d = groupStartTo + 1; d < j; ++d)
      if (to[d] != 1)
        toFactors[d] = rule.addFactor(to[d], FactorKind::Whole);
  }
  rule.operandFactors.push_back(fromFactors);
  rule.resultFactors.push_back(toFactors);
  rule.linear = true;
  return rule;
}

/// Dimensions whose size the op keeps are parallel; others whole on each
/// side (slice and pad).
ShardingRule boxFactors(const OpInstance &op) {
  ShardingRule rule;
  std::vector<int64_t> inputFactors, resultFactors;
  const Shape &inShape = op.shape(0), &outShape = op.resultShape(0);
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (inShape[d] != outShape[d]) {
      inputFactors.push_back(rule.addFactor(inShape[d], FactorKind::Whole));
      resultFactors.push_back(rule.addFactor(outShape[d], FactorKind::Whole));
    } else {
      int64_t factor = rule.addFactor(inShape[d], FactorKind::Parallel);
      inputFactors.push_back(factor);
      resultFactors.push_back(factor);
    }
  }
  rule.operandFactors.push_back(inputFactors);
  rule.resultFactors.push_back(resultFactors);
  rule.linear = true;
  return rule;
}

OpParameters reductionParameters(const OpInstance &op) {
  return ReductionParameters{op.ints("dims"), op.flag("keep_dims")};
}

OpParameters layoutParameters(const OpInstance &op) {
  LayoutParameters parameters;
  parameters.permutation = op.ints("permutation");
  parameters.offsets = op.ints("offsets");
  parameters.low = op.ints("low");
  parameters.dim = op.integer("dim");
  return parameters;
}

} // namespace

void addShapeOps(TableBuilder &table) {
  using K = AttrKind;
  table.family(OpFamily::Reduction, reductionParameters);
  // The reduction family. A sum over a split dimension is a partial sum;
  // a mean over one is not a partial sum of local means (its reduced
  // dimensions stay whole); a max over one is a partial max.
  using R = ReductionFunction;
  for (auto [name, kind] : {std::pair{"reduce_sum", R::Sum},
                            std::pair{"reduce_mean", R::Mean},
                            std::pair{"reduce_max", R::Max}}) {
    table
        .add(name, {kInput}, 1,
             {{"dims", K::Ints, true}, {"keep_dims", K::Bool, false}},
             reduceRule)
        .member(kind)
        .factors([kind = kind](const OpInstance &op) {
          ShardingRule rule = reduceFactors(
              op, kind == R::Mean ? FactorKind::Whole : FactorKind::Reduction);
          rule.linear = kind == R::Sum;
          rule.partialIsMax = kind == R::Max;
          return rule;
        })
        .cost([kind = kind](const OpInstance &op) {
          // One add (or compare) per operand element; a mean divides each
          // result once more.
          OpCost cost = elementwiseCost(op, kind == R::Mean ? 1 : 0);
          cost.flops += elementCount(op.shape(0));
          return cost;
        });
  }
  table.family(OpFamily::Layout, layoutParameters);
  table
      .add("broadcast_to", {kInput}, 1, {{"shape", K::Ints, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             Shape target = op.ints("shape");
             std::optional<Shape> shape = broadcastShapes(op.shape(0), target);
             if (!shape || *shape != target)
               return "cannot broadcast shape " + formatShape(op.shape(0)) +
                      " to " + formatShape(target);
             out.push_back(like(op, 0, target));
             return std::nullopt;
           })
      .member(LayoutKind::BroadcastTo)
      .factors([](const OpInstance &op) {
        ShardingRule rule = elementwiseFactors(op);
        rule.linear = true;
        return rule;
      })
      .flopsPerElement(0);

  // Layout.
  OpEffects sharesBytes;
  sharesBytes.sharesOperandBytes = true;
  table
      .add("reshape", {kAnyInput}, 1, {{"shape", K::Ints, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             Shape to = op.ints("shape");
             int64_t from = 1, count = 1;
             for (int64_t size : op.shape(0))
               from *= size;
             bool valid = true;
             for (int64_t size : to) {
               valid &= size >= 0;
               count *= std::max<int64_t>(size, 0);
             }
             if (!valid || count != from)
               return "cannot reshape " + formatShape(op.shape(0)) + " (" +
                      text(from) + " elements) to " + formatShape(to);
             out.push_back(like(op, 0, to));
             return std::nullopt;
           })
      .member(LayoutKind::Reshape)
      .factors(reshapeFactors)
      .flopsPerElement(0)
      .effects(sharesBytes);
  table
      .add("transpose", {kInput}, 1, {{"permutation", K::Ints, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             const Shape &shape = op.shape(0);
             Shape perm = op.ints("permutation");
             std::vector<bool> seen(shape.size(), false);
             bool valid = perm.size() == shape.size();
             Shape result;
             for (int64_t d : perm) {
               if (!valid || d < 0 || d >= static_cast<int64_t>(shape.size()) ||
                   seen[d]) {
                 valid = false;
                 break;
               }
               seen[d] = true;
               result.push_back(shape[d]);
             }
             if (!valid)
               return "expected a permutation of " + text(shape.size()) +
                      " dimensions, found " + formatShape(perm);
             out.push_back(like(op, 0, result));
             return std::nullopt;
           })
      .member(LayoutKind::Transpose)
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        std::vector<int64_t> inputFactors =
            rule.addFactors(op.shape(0), FactorKind::Parallel);
        std::vector<int64_t> resultFactors;
        for (int64_t d : op.ints("permutation"))
          resultFactors.push_back(inputFactors[d]);
        rule.operandFactors.push_back(inputFactors);
        rule.resultFactors.push_back(resultFactors);
        rule.linear = true;
        return rule;
      })
      .flopsPerElement(0);
  table
      .add("slice", {kInput}, 1,
           {{"offsets", K::Ints, true}, {"sizes", K::Ints, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             const Shape &shape = op.shape(0);
             Shape offsets = op.ints("offsets"), sizes = op.ints("sizes");
             if (offsets.size() != shape.size() || sizes.size() != shape.size())
               return "expected " + text(shape.size()) +
                      " offsets and sizes, found " + text(offsets.size()) +
                      " and " + text(sizes.size());
             for (size_t d = 0; d < shape.size(); ++d)
               if (offsets[d] < 0 || sizes[d] < 0 ||
                   offsets[d] + sizes[d] > shape[d])
                 return "slice [" + text(offsets[d]) + ", " +
                        text(offsets[d] + sizes[d]) + ") of dimension " +
                        text(d) + " is outside [0, " + text(shape[d]) + ")";
             out.push_back(like(op, 0, sizes));
             return std::nullopt;
           })
      .member(LayoutKind::Slice)
      .factors(boxFactors)
      .flopsPerElement(0);
  table
      .add("pad", {kInput}, 1,
           {{"low", K::Ints, true}, {"high", K::Ints, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             const Shape &shape = op.shape(0);
             Shape low = op.ints("low"), high = op.ints("high");
             if (low.size() != shape.size() || high.size() != shape.size())
               return "expected " + text(shape.size()) +
                      " low and high paddings, found " + text(low.size()) +
                      " and " + text(high.size());
             Shape result;
             for (size_t d = 0; d < shape.size(); ++d) {
               if (low[d] < 0 || high[d] < 0 || low[d] > (int64_t(1) << 36) ||
                   high[d] > (int64_t(1) << 36))
                 return "expected paddings in [0, 2^36], found low " +
                        formatShape(low) + " high " + formatShape(high);
               result.push_back(low[d] + shape[d] + high[d]);
             }
             out.push_back(like(op, 0, result));
             return std::nullopt;
           })
      .member(LayoutKind::Pad)
      .factors(boxFactors)
      .flopsPerElement(0);
  table
      .add("concat", {{"inputs"}}, 1, {{"dim", K::Int, true}},
           [](const OpInstance &op, Results &out) -> Diagnostic {
             Shape result = op.shape(0);
             int64_t dim = op.integer("dim");
             if (dim < 0 || dim >= static_cast<int64_t>(result.size()))
               return "expected dim in [0, " + text(result.size()) +
                      "), found " + text(dim);
             for (size_t i = 1; i < op.numInputs(); ++i) {
               const Shape &shape = op.shape(i);
               bool compatible = shape.size() == result.size();
               for (size_t d = 0; compatible && d < shape.size(); ++d)
                 compatible =
                     static_cast<int64_t>(d) == dim || shape[d] == result[d];
               if (!compatible)
                 return "cannot concatenate " + formatShape(op.shape(0)) +
                        " and " + formatShape(shape) + " along dimension " +
                        text(dim);
               result[dim] += shape[dim];
             }
             out.push_back(like(op, 0, result));
             return std::nullopt;
           })
      .member(LayoutKind::Concat)
      .variadic()
      // Every dimension but the concatenated one parallel; that one whole
      // in each input and in the result.
      .factors([](const OpInstance &op) {
        ShardingRule rule;
        const Shape &shape = op.resultShape(0);
        size_t dim = static_cast<size_t>(op.integer("dim"));
        std::vector<int64_t> factors;
        for (size_t d = 0; d < shape.size(); ++d)
          factors.push_back(
              d == dim ? ShardingRule::kNoFactor
                       : rule.addFactor(shape[d], FactorKind::Parallel));
        for (size_t i = 0; i < op.numInputs(); ++i) {
          std::vector<int64_t> inputFactors(factors);
          inputFactors[dim] =
              rule.addFactor(op.shape(i)[dim], FactorKind::Whole);
          rule.operandFactors.push_back(inputFactors);
        }
        factors[dim] = rule.addFactor(shape[dim], FactorKind::Whole);
        rule.resultFactors.push_back(factors);
        rule.linear = true;
        return rule;
      })
      .flopsPerElement(0);
}

} // namespace trellis::optable
