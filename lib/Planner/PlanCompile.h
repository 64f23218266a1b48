//===- PlanCompile.h - Compiles a plan for the planner ----------*- C++ -*-===//
//
// The planner's one way into the compiler: a model text compiled with a
// plan's options in an MLIR context of its own (so worker threads never
// share one), its first error kept as text.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_PLANNER_PLANCOMPILE_H
#define TRELLIS_LIB_PLANNER_PLANCOMPILE_H

#include "trellis/Analysis/PipelineCost.h"
#include "trellis/Planner/Planner.h"

namespace trellis::planner {

/// `request`'s compile options (batch, sequence, precision) with
/// `choice`'s parallelism.
CompileOptions compileOptionsOf(const PlanRequest &request,
                                const PlanChoice &choice);

/// Compiles `modelText` (in `request`'s format) with `options`: its forward
/// describes one micro-batch of `options.batch / options.microBatches`
/// sequences of `options.seq` tokens. Nullopt with the first error.
std::optional<CompiledModel> compilePlanModel(const PlanRequest &request,
                                              llvm::StringRef modelText,
                                              const CompileOptions &options,
                                              std::string &error);

/// The pipeline cost the compiler's stage balancer reads
/// (computePipelineCost of the forward) of `modelText` imported with
/// micro-batches of `sequences` sequences of `request.seq` tokens.
std::optional<ModelPipelineCost> pipelineCostOf(const PlanRequest &request,
                                                llvm::StringRef modelText,
                                                int64_t sequences,
                                                std::string &error);

} // namespace trellis::planner

#endif // TRELLIS_LIB_PLANNER_PLANCOMPILE_H
