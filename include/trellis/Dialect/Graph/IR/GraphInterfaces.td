//===- GraphInterfaces.td - Interfaces of graph ops --------*- tablegen -*-===//
//
// The interfaces every graph op implements. Passes are written against
// them, never against op names.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_TD
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_TD

include "mlir/IR/OpBase.td"

def Graph_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::trellis::graph";
  let description = [{
    A factor-based sharding rule (as in Shardy): every dimension of every
    operand and result maps to a factor or to none; dimensions that share a
    factor must be split alike. A factor is *parallel* (split it and every
    tensor that has it is split), *reduction* (present in operands only:
    splitting it leaves the results partial) or *whole* (must not be split).
    The rule is the op's row of the plan op table
    (trellis/Common/OpContract.h).
  }];
  let methods = [
    InterfaceMethod<"Returns the sharding rule of this op.",
      "::trellis::graph::ShardingRule", "getShardingRule", (ins), [{}], [{
        return ::trellis::graph::shardingRuleFromContract($_op);
      }]>,
    InterfaceMethod<[{
        Called by the partitioner on the per-rank copy of an op, whose
        operands and results have local types; `globalOperandTypes` are the
        types the op had before partitioning and `operandAxes` name, for
        each dimension of each operand and then each result, the mesh axes
        it is split over (an ArrayAttr per tensor, of ArrayAttrs of
        StringAttr). Rewrites attributes that
        encode global sizes (a result shape, a count to normalize by) or
        the rank's place (the axes a vocabulary is split over). Fails, with
        a diagnostic, for a split this op cannot run locally.
      }],
      "::llvm::LogicalResult", "localizeAttributes",
      (ins "::mlir::TypeRange":$globalOperandTypes,
           "::llvm::ArrayRef<::mlir::ArrayAttr>":$operandAxes), [{}], [{
        return ::mlir::success();
      }]>
  ];
}

def Graph_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::trellis::graph";
  let description = [{
    The vector-Jacobian product of an op: given the gradients of its results
    (null where a result does not reach the loss), builds the gradients of
    its operands at the builder's insertion point. Operands that are not
    differentiable (token ids, step counters) get a null gradient.
  }];
  let methods = [
    InterfaceMethod<"Builds the operand gradients from the result gradients.",
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGradients,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGradients)>
  ];
}

def Graph_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::trellis::graph";
  let description = [{
    What executing the op costs: floating-point operations and bytes read
    and written, from its static shapes (the op table's cost rule).
  }];
  let methods = [
    InterfaceMethod<"Returns the cost of one execution.",
      "::trellis::graph::OpCost", "getCost", (ins), [{}], [{
        return ::trellis::graph::costFromContract($_op);
      }]>
  ];
}

def Graph_PrecisionOpInterface : OpInterface<"PrecisionOpInterface"> {
  let cppNamespace = "::trellis::graph";
  let description = [{
    Which precision the op computes in under mixed precision: the policy the
    `-trellis-mixed-precision` pass inserts casts from (the op table's
    policy). Most ops compute in the low precision; some stay in fp32.
  }];
  let methods = [
    InterfaceMethod<"Returns the op's precision policy.",
      "::trellis::graph::PrecisionPolicy", "getPrecisionPolicy", (ins), [{}],
      [{
        return ::trellis::graph::precisionFromContract($_op);
      }]>
  ];
}

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_TD
