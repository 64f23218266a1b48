//===- CollectiveOps.cpp - Rows of collectives and transfers --------------===//
//
// Ops that communicate over the mesh axes in `axes` (the group: every rank
// that differs from this one only along them). The partitioner and the
// pipeline split make them; they have no sharding rule and no flops.
//
//===----------------------------------------------------------------------===//

#include "../OpTable.h"

namespace trellis::optable {

namespace {

Diagnostic checkDim(const OpInstance &op, const std::string &name) {
  int64_t dim = op.integer(name);
  int64_t rank = op.shape(0).size();
  if (dim < 0 || dim >= rank)
    return "expected " + name + " in [0, " + text(rank) + "), found " +
           text(dim);
  return std::nullopt;
}

Diagnostic checkDivisible(const OpInstance &op, int64_t dim) {
  int64_t size = op.shape(0)[dim];
  if (size % op.groupSize() != 0)
    return "dimension " + text(dim) + " of size " + text(size) +
           " is not divisible by the group size " + text(op.groupSize());
  return std::nullopt;
}

Diagnostic checkPosition(const OpInstance &op, const std::string &name) {
  int64_t position = op.integer(name);
  if (position < 0 || position >= op.groupSize())
    return name + " " + text(position) + " is not a position in a group of " +
           text(op.groupSize());
  return std::nullopt;
}

Diagnostic checkReduceKind(const OpInstance &op) {
  std::string kind = op.text("kind");
  if (!parseReduceKind(kind))
    return "expected kind sum, max or min, found '" + kind + "'";
  return std::nullopt;
}

/// A transfer's peer is a position in its group, and its channel a
/// number >= 0.
Diagnostic checkTransfer(const OpInstance &op) {
  TRELLIS_CHECK(checkPosition(op, "peer"));
  if (op.integer("channel") < 0)
    return "expected a channel >= 0, found " + text(op.integer("channel"));
  return std::nullopt;
}

/// The input with dimension `dim` divided by the group size.
Diagnostic splitRule(const OpInstance &op, Results &out) {
  TRELLIS_CHECK(checkDim(op, "dim"));
  int64_t dim = op.integer("dim");
  TRELLIS_CHECK(checkDivisible(op, dim));
  Shape result = op.shape(0);
  result[dim] /= op.groupSize();
  out.push_back(like(op, 0, result));
  return std::nullopt;
}

OpParameters collectiveParameters(const OpInstance &op) {
  CollectiveParameters parameters;
  // Ops without a kind (gathers, transfers) read the default.
  parameters.kind = parseReduceKind(op.text("kind")).value_or(ReduceKind::Sum);
  parameters.dim = op.integer("dim");
  parameters.splitDim = op.integer("split_dim");
  parameters.concatDim = op.integer("concat_dim");
  parameters.root = op.integer("root");
  parameters.shift = op.integer("shift");
  parameters.peer = op.integer("peer");
  parameters.channel = op.integer("channel");
  return parameters;
}

} // namespace

void addCollectiveOps(TableBuilder &table) {
  using K = AttrKind;
  // addCollective sets each row's family (collective or point-to-point)
  // from its kind; both read the same parameters.
  table.family(OpFamily::Collective, collectiveParameters);
  table.addCollective("all_reduce", {kInput}, 1, {{"kind", K::String, true}},
                      [](const OpInstance &op, Results &out) -> Diagnostic {
                        TRELLIS_CHECK(checkReduceKind(op));
                        out.push_back(op.input(0));
                        return std::nullopt;
                      });
  table.addCollective("all_gather", {kAnyInput}, 1, {{"dim", K::Int, true}},
                      [](const OpInstance &op, Results &out) -> Diagnostic {
                        TRELLIS_CHECK(checkDim(op, "dim"));
                        Shape result = op.shape(0);
                        result[op.integer("dim")] *= op.groupSize();
                        out.push_back(like(op, 0, result));
                        return std::nullopt;
                      });
  table.addCollective("reduce_scatter", {kInput}, 1,
                      {{"kind", K::String, true}, {"dim", K::Int, true}},
                      [](const OpInstance &op, Results &out) -> Diagnostic {
                        TRELLIS_CHECK(checkReduceKind(op));
                        return splitRule(op, out);
                      });
  table.addCollective(
      "all_to_all", {kAnyInput}, 1,
      {{"split_dim", K::Int, true}, {"concat_dim", K::Int, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(checkDim(op, "split_dim"));
        TRELLIS_CHECK(checkDim(op, "concat_dim"));
        int64_t split = op.integer("split_dim");
        int64_t concat = op.integer("concat_dim");
        TRELLIS_CHECK(checkDivisible(op, split));
        Shape result = op.shape(0);
        result[split] /= op.groupSize();
        result[concat] *= op.groupSize();
        out.push_back(like(op, 0, result));
        return std::nullopt;
      });
  table.addCollective("broadcast", {kAnyInput}, 1, {{"root", K::Int, true}},
                      [](const OpInstance &op, Results &out) -> Diagnostic {
                        TRELLIS_CHECK(checkPosition(op, "root"));
                        out.push_back(op.input(0));
                        return std::nullopt;
                      });
  table.addCollective("slice_shard", {kAnyInput}, 1, {{"dim", K::Int, true}},
                      splitRule);
  table.addCollective("collective_permute", {kAnyInput}, 1,
                      {{"shift", K::Int, true}}, sameAsInputRule);
  table.addCollective(
      "send", {kAnyInput}, 0,
      {{"peer", K::Int, true}, {"channel", K::Int, true}},
      [](const OpInstance &op, Results &) { return checkTransfer(op); });
  // A receive fills the buffer its send reads (one buffer of the plan), so
  // its result type is that buffer's: the rule checks the peer and channel
  // only.
  table.addCollective(
      "recv", {}, 1, {{"peer", K::Int, true}, {"channel", K::Int, true}},
      [](const OpInstance &op, Results &) { return checkTransfer(op); });
}

} // namespace trellis::optable
