//===- CompilerInternals.h - What the C API's compiler files share -*- C++
//-*-===//
//
// The compiler half of the C API is three files: Models.cpp (models from
// configs and MLIR), GraphBuilder.cpp (graphs built op by op) and
// Compilations.cpp (compile options and compilations). This is what they
// share: diagnostics capture, contexts, and the model handles.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_CAPI_COMPILERINTERNALS_H
#define TRELLIS_LIB_CAPI_COMPILERINTERNALS_H

#include "trellis-c/Compiler.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "trellis/CAPI/Handles.h"
#include "trellis/Compiler/Compile.h"
#include "trellis/Compiler/DiagnosticText.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>
#include <string>

namespace trellis::capi {

/// Collects a context's diagnostics while it lives: errors apart from the
/// warnings and remarks, each as the driver prints it.
class DiagnosticCapture {
public:
  explicit DiagnosticCapture(mlir::MLIRContext &context)
      : context_(context),
        id_(context.getDiagEngine().registerHandler(
            [this](mlir::Diagnostic &d) {
              llvm::raw_string_ostream os(
                  d.getSeverity() == mlir::DiagnosticSeverity::Error ? errors
                                                                     : others);
              printDiagnostic(d, os);
              return mlir::success();
            })) {
    context.printOpOnDiagnostic(false);
  }
  ~DiagnosticCapture() { context_.getDiagEngine().eraseHandler(id_); }

  /// Sends a message of the compiler library to the same texts.
  void message(MessageKind kind, const llvm::Twine &text) {
    switch (kind) {
    case MessageKind::Error:
      errors += "error: " + text.str() + "\n";
      return;
    case MessageKind::LocatedError:
      errors += text.str();
      return;
    case MessageKind::Warning:
      others += "warning: " + text.str() + "\n";
      return;
    }
  }

  /// A status holding every error, or `fallback` when none was reported.
  /// A status is an error already: its lines drop the driver's leading
  /// "error: " (a located one keeps "FILE:L:C: error: ").
  TrellisStatus failure(const std::string &fallback) const {
    std::string text = errors.empty() ? fallback : withoutErrorPrefix(errors);
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    return errorStatus(text);
  }

  /// A status of "`context`: " and every error (`context` alone when none
  /// was reported).
  TrellisStatus failureIn(const std::string &context) const {
    std::string text = withoutErrorPrefix(errors);
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    return errorStatus(text.empty() ? context : context + ": " + text);
  }

  std::string errors, others;

private:
  static std::string withoutErrorPrefix(const std::string &text) {
    std::string out;
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      end = end == std::string::npos ? text.size() : end + 1;
      llvm::StringRef line(text.data() + begin, end - begin);
      line.consume_front("error: ");
      out += line.str();
      begin = end;
    }
    return out;
  }

  mlir::MLIRContext &context_;
  mlir::DiagnosticEngine::HandlerID id_;
};

/// A context with the compiler's dialects, single-threaded.
std::unique_ptr<mlir::MLIRContext> makeContext();

struct Model {
  std::unique_ptr<mlir::MLIRContext> context;
  /// A config (imported when compiled) ...
  std::optional<std::string> configText;
  /// ... or a module of fixed shapes.
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string sourceName;
  llvm::json::Object metadata;
};

/// Every live model, by handle.
extern HandleTable<Model> models;

/// A module of the model (a config imported at `shape`) in the model's
/// context, or nullopt after reporting why to `capture`.
std::optional<LoadedModel> instantiate(Model &model, const BatchShape &shape,
                                       DiagnosticCapture &capture);

/// Stores a model (a config's text, or a loaded module) as a new handle.
TrellisStatus storeModel(std::unique_ptr<mlir::MLIRContext> context,
                         std::optional<LoadedModel> loaded,
                         std::optional<std::string> configText,
                         llvm::StringRef sourceName, TrellisModel *handle);

} // namespace trellis::capi

#endif // TRELLIS_LIB_CAPI_COMPILERINTERNALS_H
