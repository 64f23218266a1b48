//===- Passes.h - Sharding passes -------------------------------*- C++ -*-===//

#ifndef TRELLIS_SHARDING_PASSES_H
#define TRELLIS_SHARDING_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

namespace trellis {

#define GEN_PASS_DECL
#include "trellis/Sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trellis/Sharding/Passes.h.inc"

/// The attribute propagation leaves on ops: one sharding per result.
constexpr llvm::StringLiteral kResultShardingsAttrName =
    TrellisDialect::kResultShardingsAttrName;

/// Adds preset, propagation, partitioning and gradient bucketing for a
/// `dataParallel` x `tensorParallel` mesh on `function`.
void buildShardingPipeline(mlir::OpPassManager &pm, llvm::StringRef function,
                           int64_t dataParallel, int64_t tensorParallel,
                           int64_t bucketBytes, bool explain = false);

} // namespace trellis

#endif // TRELLIS_SHARDING_PASSES_H
