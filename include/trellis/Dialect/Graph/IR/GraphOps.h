//===- GraphOps.h - Operations of the graph dialect -------------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHOPS_H
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphEnums.h"
#include "trellis/Dialect/Graph/IR/GraphInterfaces.h"

#define GET_OP_CLASSES
#include "trellis/Dialect/Graph/IR/GraphOps.h.inc"

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHOPS_H
