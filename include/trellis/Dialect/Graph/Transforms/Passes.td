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

def FuseElementwisePass : Pass<"trellis-fuse-elementwise"> {
  let summary = "Fuses chains and trees of elementwise ops into one op";
  let description = [{
    In every function, a tree of elementwise ops (add, sub, mul, div,
    maximum, scale, the unary functions, unary_grad, cast) whose inner
    results have one user each, in the same block, with the root's shape,
    and in the same program (graph.phase, graph.part, trellis.stage,
    trellis.program alike) becomes one graph.fused_elementwise at the root:
    its inputs are the tree's outside operands (broadcast as the members
    broadcast them), its program the members in order. Results are
    unchanged bit for bit (every slot is rounded as its member rounds); the
    intermediates vanish from the memory plan. A value with two users (a
    forward activation the backward reads) ends a tree.
  }];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

#endif // TRELLIS_DIALECT_GRAPH_TRANSFORMS_PASSES_TD
