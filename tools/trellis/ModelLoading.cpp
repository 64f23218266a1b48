//===- ModelLoading.cpp - Shared model input for driver commands ----------===//

#include "ModelLoading.h"

#include "mlir/IR/MLIRContext.h"
#include "trellis/Compiler/Compile.h"
#include "llvm/Support/WithColor.h"

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
  loadCompilerDialects(context);
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
  return parseMeshText(text, "--mesh",
                       [](MessageKind kind, const llvm::Twine &message) {
                         printMessage("groups", kind, message);
                       });
}

int reportError(llvm::StringRef command, const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), ("trellis " + command).str())
      << message << "\n";
  return 1;
}

void printMessage(llvm::StringRef command, MessageKind kind,
                  const llvm::Twine &message) {
  switch (kind) {
  case MessageKind::Error:
    reportError(command, message);
    return;
  case MessageKind::LocatedError:
    llvm::errs() << message;
    return;
  case MessageKind::Warning:
    llvm::WithColor::warning(llvm::errs(), ("trellis " + command).str())
        << message << "\n";
    return;
  }
}

std::optional<LoadedModel> loadModel(MLIRContext &context, llvm::StringRef path,
                                     const BatchShape &shape,
                                     llvm::StringRef command) {
  loadDriverDialects(context);
  return loadModelFile(context, path, shape,
                       [&](MessageKind kind, const llvm::Twine &message) {
                         printMessage(command, kind, message);
                       });
}

} // namespace trellis::driver
