//===- ModelLoading.cpp - Shared model input for driver commands ----------===//

#include "ModelLoading.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "trellis/Compiler/Compile.h"
#include "trellis/Compiler/DiagnosticText.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;

namespace trellis::driver {

void loadDriverDialects(MLIRContext &context) {
  loadCompilerDialects(context);
  // Print every diagnostic, remarks included (--explain), as `location:
  // severity: message` (printDiagnostic), without dumping the op a pass
  // failed on.
  context.printOpOnDiagnostic(false);
  context.getDiagEngine().registerHandler([](Diagnostic &diagnostic) {
    printDiagnostic(diagnostic, llvm::errs());
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

int writeOutputFile(llvm::StringRef command, llvm::StringRef what,
                    llvm::StringRef path,
                    llvm::function_ref<void(llvm::raw_ostream &)> write) {
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(path, &error);
  if (!output)
    return reportError(command, what + ": " + error);
  llvm::raw_fd_ostream &stream = output->os();
  write(stream);
  // Standard output stays open; a file is closed here, so that an error
  // its last bytes meet is seen.
  if (path == "-")
    stream.flush();
  else
    stream.close();
  if (std::error_code failed = stream.error()) {
    stream.clear_error();
    return reportError(command, "cannot write " + what + " to '" + path +
                                    "': " + failed.message());
  }
  output->keep();
  return 0;
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
