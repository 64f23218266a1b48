//===- Passes.h - Passes over graph ops -------------------------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_TRANSFORMS_PASSES_H
#define TRELLIS_DIALECT_GRAPH_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace trellis::graph {

#define GEN_PASS_DECL
#include "trellis/Dialect/Graph/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trellis/Dialect/Graph/Transforms/Passes.h.inc"

} // namespace trellis::graph

#endif // TRELLIS_DIALECT_GRAPH_TRANSFORMS_PASSES_H
