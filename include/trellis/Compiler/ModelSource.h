//===- ModelSource.h - A model to compile, from a file or text --*- C++ -*-===//
//
// The compiler reads a model as a Hugging Face config.json (imported at a
// batch shape) or as MLIR text of graph ops (parsed and verified).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMPILER_MODELSOURCE_H
#define TRELLIS_COMPILER_MODELSOURCE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "trellis/Compiler/MessageSink.h"
#include "trellis/Frontend/ModelImporter.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace trellis {

/// Loads every dialect a model, a training step or a plan's IR uses.
void loadCompilerDialects(mlir::MLIRContext &context);

/// A model: its module and the facts it puts into the plan's metadata
/// (config fields, batch shape, source).
struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  llvm::json::Object metadata;
};

enum class ModelFormat { Config, Mlir };

/// Reads `text` as `format`: a config is imported at `shape`; MLIR is parsed
/// and verified, its errors printed to `parseOutput` located in `sourceName`
/// with the line and a caret. Config errors go to `sink` as "<sourceName>:
/// <message>".
std::optional<LoadedModel>
loadModelText(mlir::MLIRContext &context, llvm::StringRef text,
              ModelFormat format, llvm::StringRef sourceName,
              const BatchShape &shape, MessageSink sink,
              llvm::raw_ostream &parseOutput = llvm::errs());

/// Reads the file `path` ("-": standard input): MLIR when it ends in
/// `.mlir`, else a config. A path that is not a regular file, or cannot be
/// read, is an error naming it.
std::optional<LoadedModel>
loadModelFile(mlir::MLIRContext &context, llvm::StringRef path,
              const BatchShape &shape, MessageSink sink,
              llvm::raw_ostream &parseOutput = llvm::errs());

} // namespace trellis

#endif // TRELLIS_COMPILER_MODELSOURCE_H
