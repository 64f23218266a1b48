//===- CompileForFuzzing.h - The compiler's path, for fuzz targets -*- C++ -*-===//
//
// What `trellis compile` does to a module (autodiff, a preset's shardings,
// propagation, partitioning, fusion, the plan), with its parallel options
// chosen by one byte, and every diagnostic swallowed: a fuzz target only
// looks for crashes, hangs and sanitizer reports, never for errors.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_TOOLS_FUZZ_COMPILEFORFUZZING_H
#define TRELLIS_TOOLS_FUZZ_COMPILEFORFUZZING_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>

namespace trellis::fuzz {

/// A context with the driver's dialects whose diagnostics go nowhere.
void prepareContext(mlir::MLIRContext &context);

/// Verifies `module`, then (when it verifies) compiles it like `trellis
/// compile` with the dp / tp / ZeRO / sequence-parallel / context-parallel
/// options that `options` selects, and emits the plan. Results are
/// discarded; failures are fine.
void compileForFuzzing(mlir::ModuleOp module, uint8_t options);

} // namespace trellis::fuzz

#endif // TRELLIS_TOOLS_FUZZ_COMPILEFORFUZZING_H
