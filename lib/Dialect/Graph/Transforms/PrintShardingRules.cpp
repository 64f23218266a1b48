//===- PrintShardingRules.cpp - Sharding rules as remarks -----------------===//

#include "trellis/Dialect/Graph/Transforms/Passes.h"

#include "trellis/Dialect/Graph/IR/GraphOps.h"

namespace trellis::graph {
#define GEN_PASS_DEF_PRINTSHARDINGRULESPASS
#include "trellis/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace trellis::graph

using namespace mlir;
using namespace trellis::graph;

namespace {
struct PrintShardingRulesPass
    : public trellis::graph::impl::PrintShardingRulesPassBase<
          PrintShardingRulesPass> {
  void runOnOperation() override {
    getOperation()->walk([](ShardingRuleOpInterface op) {
      op->emitRemark() << "sharding rule: " << op.getShardingRule().toString();
    });
  }
};
} // namespace
