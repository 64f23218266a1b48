//===- ModelLoading.h - Shared model input for driver commands --*- C++ -*-===//

#ifndef TRELLIS_TOOLS_TRELLIS_MODELLOADING_H
#define TRELLIS_TOOLS_TRELLIS_MODELLOADING_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "trellis/Common/Mesh.h"
#include "trellis/Compiler/ModelSource.h"

namespace trellis::driver {

/// Registers every dialect the driver reads or writes, and prints the
/// context's diagnostics as `location: severity: message`.
void loadDriverDialects(mlir::MLIRContext &context);

/// Reads `path`: a config is imported at `shape`; MLIR is parsed and
/// verified. Prints `error:` diagnostics naming the file and returns null on
/// failure.
std::optional<LoadedModel> loadModel(mlir::MLIRContext &context,
                                     llvm::StringRef path,
                                     const BatchShape &shape,
                                     llvm::StringRef command);

/// Parses the text of a `--mesh` option; on malformed text prints a
/// diagnostic located in the option (`--mesh:1:COL`, the text and a caret)
/// and returns nullopt.
std::optional<Mesh> parseMeshOption(llvm::StringRef text);

/// Reports an error as `trellis <command>: error: <message>`; returns 1.
int reportError(llvm::StringRef command, const llvm::Twine &message);

/// Writes what `write` prints to `path` (`-`: standard output), kept only
/// when whole. Returns 0; or reports, naming `what`, the path and the
/// system's reason (a full disk, a closed pipe), and returns 1: never the
/// fatal error of an unchecked stream.
int writeOutputFile(llvm::StringRef command, llvm::StringRef what,
                    llvm::StringRef path,
                    llvm::function_ref<void(llvm::raw_ostream &)> write);

/// Prints the compiler library's messages for `command`: errors as
/// reportError does, located ones as they are, warnings as `trellis
/// <command>: warning: <message>`.
void printMessage(llvm::StringRef command, MessageKind kind,
                  const llvm::Twine &message);

} // namespace trellis::driver

#endif // TRELLIS_TOOLS_TRELLIS_MODELLOADING_H
