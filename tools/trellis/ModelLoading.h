//===- ModelLoading.h - Shared model input for driver commands --*- C++ -*-===//

#ifndef TRELLIS_TOOLS_TRELLIS_MODELLOADING_H
#define TRELLIS_TOOLS_TRELLIS_MODELLOADING_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "trellis/Common/Mesh.h"
#include "trellis/Frontend/ModelImporter.h"
#include "llvm/Support/JSON.h"

namespace trellis::driver {

/// Registers every dialect the driver reads or writes.
void loadDriverDialects(mlir::MLIRContext &context);

/// A model read from a Hugging Face config (.json) or MLIR text (.mlir).
struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// Facts for the plan's metadata (config fields, batch shape).
  llvm::json::Object metadata;
};

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

} // namespace trellis::driver

#endif // TRELLIS_TOOLS_TRELLIS_MODELLOADING_H
