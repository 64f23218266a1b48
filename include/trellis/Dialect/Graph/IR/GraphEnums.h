//===- GraphEnums.h - Enumerations of the graph dialect ---------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHENUMS_H
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHENUMS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "trellis/Dialect/Graph/IR/GraphEnums.h.inc"

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHENUMS_H
