//===- GraphDialect.h - The graph op set ------------------------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHDIALECT_H
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHDIALECT_H

#include "mlir/IR/Dialect.h"

#include "trellis/Dialect/Graph/IR/GraphOpsDialect.h.inc"

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHDIALECT_H
