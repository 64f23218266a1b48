//===- Models.cpp - Models in the C API -----------------------------------===//
//
// Models from a config (imported at each compile's shape) or MLIR text.
//
//===----------------------------------------------------------------------===//

#include "CompilerInternals.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "trellis/Common/FileKind.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

using namespace mlir;
using namespace trellis;
using namespace trellis::capi;

namespace trellis::capi {

std::unique_ptr<MLIRContext> makeContext() {
  auto context =
      std::make_unique<MLIRContext>(MLIRContext::Threading::DISABLED);
  loadCompilerDialects(*context);
  return context;
}

HandleTable<Model> models("TrellisModel");

/// A module of the model (a config imported at `shape`) in the model's
/// context, or nullopt after reporting why to `capture`.
std::optional<LoadedModel> instantiate(Model &model, const BatchShape &shape,
                                       DiagnosticCapture &capture) {
  auto sink = [&](MessageKind kind, const llvm::Twine &text) {
    capture.message(kind, text);
  };
  if (model.configText) {
    llvm::raw_string_ostream parseErrors(capture.errors);
    return loadModelText(*model.context, *model.configText, ModelFormat::Config,
                         model.sourceName, shape, sink, parseErrors);
  }
  LoadedModel loaded;
  loaded.module = model.module->clone();
  loaded.metadata = model.metadata;
  return loaded;
}

TrellisStatus storeModel(std::unique_ptr<MLIRContext> context,
                         std::optional<LoadedModel> loaded,
                         std::optional<std::string> configText,
                         llvm::StringRef sourceName, TrellisModel *handle) {
  auto model = std::make_unique<Model>();
  model->context = std::move(context);
  model->sourceName = sourceName.str();
  model->configText = std::move(configText);
  if (loaded) {
    model->module = std::move(loaded->module);
    model->metadata = std::move(loaded->metadata);
  }
  handle->id = models.insert(std::move(model));
  return nullptr;
}

} // namespace trellis::capi

namespace {

TrellisStatus createModel(llvm::StringRef text, TrellisModelFormat format,
                          llvm::StringRef sourceName, TrellisModel *handle) {
  std::unique_ptr<MLIRContext> context = makeContext();
  if (format == TRELLIS_MODEL_FORMAT_CONFIG) {
    // Checked now (the fields, not a shape): a config that cannot be
    // imported fails here, not at the first compile.
    llvm::Expected<TransformerConfig> config = parseTransformerConfig(text);
    if (!config)
      return errorStatus(sourceName.str() + ": " +
                         llvm::toString(config.takeError()));
    return storeModel(std::move(context), std::nullopt, text.str(), sourceName,
                      handle);
  }
  if (format != TRELLIS_MODEL_FORMAT_MLIR)
    return errorStatus("unknown model format " +
                       std::to_string(static_cast<int>(format)) +
                       ": expected TRELLIS_MODEL_FORMAT_CONFIG or "
                       "TRELLIS_MODEL_FORMAT_MLIR");
  DiagnosticCapture capture(*context);
  llvm::raw_string_ostream parseErrors(capture.errors);
  std::optional<LoadedModel> loaded = loadModelText(
      *context, text, ModelFormat::Mlir, sourceName, BatchShape(),
      [&](MessageKind kind, const llvm::Twine &message) {
        capture.message(kind, message);
      },
      parseErrors);
  parseErrors.flush();
  if (!loaded)
    return capture.failure(sourceName.str() + ": cannot parse the model");
  if (!loaded->module->lookupSymbol<func::FuncOp>("forward") &&
      !loaded->module->lookupSymbol<func::FuncOp>("train_step") &&
      !loaded->module->lookupSymbol<func::FuncOp>("gradients"))
    return errorStatus(sourceName.str() +
                       ": expected a function @forward (or a step "
                       "@train_step or @gradients), found none");
  return storeModel(std::move(context), std::move(loaded), std::nullopt,
                    sourceName, handle);
}

} // namespace

extern "C" {

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

TrellisStatus trellisModelCreateFromFile(const char *path,
                                         TrellisModel *model) {
  TRELLIS_CAPI_REQUIRE(path);
  TRELLIS_CAPI_REQUIRE(model);
  return guarded(__func__, [&]() -> TrellisStatus {
    std::string text;
    if (std::string why = readRegularFile(
            path, text,
            llvm::StringRef(path).ends_with(".mlir") ? kMaxMlirFileBytes
                                                     : kMaxConfigFileBytes);
        !why.empty())
      return errorStatus(std::string("cannot read '") + path + "': it " + why +
                         ", expected a config.json or .mlir file");
    return createModel(text,
                       llvm::StringRef(path).ends_with(".mlir")
                           ? TRELLIS_MODEL_FORMAT_MLIR
                           : TRELLIS_MODEL_FORMAT_CONFIG,
                       path, model);
  });
}

TrellisStatus trellisModelCreateFromText(const char *text, size_t length,
                                         TrellisModelFormat format,
                                         const char *sourceName,
                                         TrellisModel *model) {
  TRELLIS_CAPI_REQUIRE(text);
  TRELLIS_CAPI_REQUIRE(model);
  return guarded(__func__, [&]() -> TrellisStatus {
    return createModel(llvm::StringRef(text, length), format,
                       sourceName ? sourceName : "<model>", model);
  });
}

void trellisModelDestroy(TrellisModel model) { models.erase(model.id); }

TrellisStatus trellisModelPrint(TrellisModel handle, int64_t batch, int64_t seq,
                                TrellisStringCallback callback,
                                void *userData) {
  TRELLIS_CAPI_REQUIRE(callback);
  Model *model = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(models.lookup(handle.id, model));
  return guarded(__func__, [&]() -> TrellisStatus {
    DiagnosticCapture capture(*model->context);
    std::optional<LoadedModel> loaded =
        instantiate(*model, {batch, seq}, capture);
    if (!loaded)
      return capture.failure("cannot import the model");
    std::string text;
    llvm::raw_string_ostream os(text);
    loaded->module->print(os);
    os.flush();
    sendString(text, callback, userData);
    return nullptr;
  });
}

} // extern "C"
