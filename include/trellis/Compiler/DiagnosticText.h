//===- DiagnosticText.h - Diagnostics as compilers print them ---*- C++ -*-===//

#ifndef TRELLIS_COMPILER_DIAGNOSTICTEXT_H
#define TRELLIS_COMPILER_DIAGNOSTICTEXT_H

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

namespace trellis {

/// Prints `diagnostic` and its notes, a line each, as `location: severity:
/// message`: `file:line:col` for source positions, the name of a named
/// location (`transformer.h.0`, with its position in parentheses where it
/// has one: `model.h.0.mlp (model.py:12:0)`), nothing for an unknown one, MLIR's own
/// form otherwise.
void printDiagnostic(mlir::Diagnostic &diagnostic, llvm::raw_ostream &os);

} // namespace trellis

#endif // TRELLIS_COMPILER_DIAGNOSTICTEXT_H
