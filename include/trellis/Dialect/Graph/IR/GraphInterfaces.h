//===- GraphInterfaces.h - Interfaces of graph ops --------------*- C++ -*-===//
//
// The sharding rule, gradient, cost and precision interfaces, and the plain
// data they return.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_H
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"
#include "trellis/Common/OpContract.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace trellis::graph {

// The plain data the interfaces return: the op table's
// (trellis/Common/OpContract.h), free of MLIR.
using FactorKind = ::trellis::FactorKind;
using ShardingRule = ::trellis::ShardingRule;
using PrecisionPolicy = ::trellis::PrecisionPolicy;
using OpCost = ::trellis::OpCost;

/// The interfaces' default methods: the op's row of the plan op table,
/// evaluated on its operand and result types and inherent attributes.
/// Defined in GraphContract.cpp.
ShardingRule shardingRuleFromContract(mlir::Operation *op);
OpCost costFromContract(mlir::Operation *op);
PrecisionPolicy precisionFromContract(mlir::Operation *op);

/// The cost of `op` were its operands and results of `operandShapes` and
/// `resultShapes` (their element types and the attributes unchanged): what
/// one rank's piece of a sharded op costs.
OpCost costWithShapes(mlir::Operation *op,
                      llvm::ArrayRef<llvm::SmallVector<int64_t>> operandShapes,
                      llvm::ArrayRef<llvm::SmallVector<int64_t>> resultShapes);

} // namespace trellis::graph

#include "trellis/Dialect/Graph/IR/GraphInterfaces.h.inc"

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHINTERFACES_H
