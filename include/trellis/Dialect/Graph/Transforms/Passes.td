//===- Passes.td - Passes over graph ops -------------------*- tablegen -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_TRANSFORMS_PASSES_TD
#define TRELLIS_DIALECT_GRAPH_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintShardingRulesPass : Pass<"trellis-print-sharding-rules"> {
  let summary = "Reports the sharding rule of every graph op as a remark";
  let description = [{
    For inspection and tests of the ShardingRuleOpInterface: each op that
    implements it gets a remark
    `sharding rule: ([f0, f2], [f2, f1]) -> ([f0, f1]) {f0=8 parallel, ...}`
    listing, per operand and result dimension, its factor (`_` for none) and
    each factor's size and kind. Changes nothing.
  }];
}

def PrintOpCostsPass : Pass<"trellis-print-op-costs"> {
  let summary = "Reports the cost of every graph op as a remark";
  let description = [{
    For inspection and tests of the CostOpInterface: each op that implements
    it gets a remark `cost: <flops> flops, <read> bytes read, <written> bytes
    written`, and the enclosing function one with the totals. Changes nothing.
  }];
}

#endif // TRELLIS_DIALECT_GRAPH_TRANSFORMS_PASSES_TD
