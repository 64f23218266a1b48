//===- ModelLoading.cpp - Shared model input for driver commands ----------===//

#include "ModelLoading.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "trellis/Common/FileKind.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

#include <algorithm>

using namespace mlir;

namespace trellis::driver {

/// Prints a location as compilers do: `file:line:col` for source
/// positions, the name of a named location (`transformer.h.0`), MLIR's own
/// form otherwise.
static void printLocation(Location location, llvm::raw_ostream &os) {
  if (auto file = llvm::dyn_cast<FileLineColLoc>(location)) {
    os << file.getFilename().getValue() << ":" << file.getLine() << ":"
       << file.getColumn();
    return;
  }
  if (auto name = llvm::dyn_cast<NameLoc>(location)) {
    os << name.getName().getValue();
    return;
  }
  os << location;
}

void loadDriverDialects(MLIRContext &context) {
  context.loadDialect<graph::GraphDialect, TrellisDialect, func::FuncDialect>();
  // Print every diagnostic, remarks included (--explain), as
  // `location: severity: message` (see printLocation), without dumping the op a
  // pass failed on.
  context.printOpOnDiagnostic(false);
  context.getDiagEngine().registerHandler([](Diagnostic &diagnostic) {
    auto print = [](Diagnostic &d) {
      if (!llvm::isa<UnknownLoc>(d.getLocation())) {
        printLocation(d.getLocation(), llvm::errs());
        llvm::errs() << ": ";
      }
      switch (d.getSeverity()) {
      case DiagnosticSeverity::Error:
        llvm::errs() << "error: ";
        break;
      case DiagnosticSeverity::Warning:
        llvm::errs() << "warning: ";
        break;
      case DiagnosticSeverity::Remark:
        llvm::errs() << "remark: ";
        break;
      case DiagnosticSeverity::Note:
        llvm::errs() << "note: ";
        break;
      }
      llvm::errs() << d << "\n";
    };
    print(diagnostic);
    for (Diagnostic &note : diagnostic.getNotes())
      print(note);
    return success();
  });
}

std::optional<Mesh> parseMeshOption(llvm::StringRef text) {
  MeshError error;
  std::optional<Mesh> mesh = Mesh::parse(std::string_view(text), &error);
  if (mesh)
    return mesh;
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, "--mesh"), llvm::SMLoc());
  const char *start =
      sourceMgr.getMemoryBuffer(1)->getBufferStart() +
      std::min(error.column ? error.column - 1 : 0, text.size());
  sourceMgr.PrintMessage(llvm::errs(), llvm::SMLoc::getFromPointer(start),
                         llvm::SourceMgr::DK_Error, error.message);
  return std::nullopt;
}

int reportError(llvm::StringRef command, const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), ("trellis " + command).str())
      << message << "\n";
  return 1;
}

std::optional<LoadedModel> loadModel(MLIRContext &context, llvm::StringRef path,
                                     const BatchShape &shape,
                                     llvm::StringRef command) {
  loadDriverDialects(context);
  // "-" is standard input; anything else must be a file (a FIFO or
  // /dev/zero would be read without end).
  if (path != "-")
    if (std::string kind = whyNotRegularFile(path.str()); !kind.empty()) {
      reportError(command, "cannot read '" + path + "': it " + kind +
                               ", expected a config.json or .mlir file");
      return std::nullopt;
    }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFileOrSTDIN(path);
  if (!file) {
    reportError(command,
                "cannot read '" + path + "': " + file.getError().message());
    return std::nullopt;
  }
  LoadedModel model;
  if (path.ends_with(".mlir")) {
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
    SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    model.module = parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!model.module)
      return std::nullopt;
    model.metadata["source"] = path.str();
    return model;
  }
  llvm::Expected<TransformerConfig> config =
      parseTransformerConfig((*file)->getBuffer());
  if (!config) {
    reportError(command, path + ": " + llvm::toString(config.takeError()));
    return std::nullopt;
  }
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      importTransformer(context, *config, shape);
  if (!module) {
    reportError(command, path + ": " + llvm::toString(module.takeError()));
    return std::nullopt;
  }
  model.module = std::move(*module);
  bool gpt2 = config->family == TransformerConfig::Family::Gpt2;
  model.metadata = llvm::json::Object{
      {"source", path.str()},
      {"family", gpt2 ? "gpt2" : "llama"},
      {"layers", config->numLayers},
      {"hidden_size", config->hiddenSize},
      {"heads", config->numHeads},
      {"kv_heads", config->numKvHeads},
      {"vocab_size", config->vocabSize},
      {"parameters", config->numParameters()},
      {"batch", shape.batch},
      {"seq", shape.seq},
  };
  return model;
}

} // namespace trellis::driver
