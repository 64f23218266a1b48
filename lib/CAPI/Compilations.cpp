//===- Compilations.cpp - Compile options and compilations in the C API ---===//
//
// Options set by key (the CLI's names), a model compiled with them into a
// plan or MLIR, its report and diagnostics.
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
#include "trellis/Compiler/CompileOptionTable.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Planner/Planner.h"
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

namespace {

/// Compile options and which keys were given.
struct CompileOptionSet {
  CompileOptions options;
  bool batchGiven = false;
};

HandleTable<CompileOptionSet> compileOptions("TrellisCompileOptions");

TrellisStatus setCompileOption(TrellisCompileOptions handle, const char *key,
                               OptionType type, const OptionValue &value) {
  TRELLIS_CAPI_REQUIRE(key);
  CompileOptionSet *set = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compileOptions.lookup(handle.id, set));
  TRELLIS_CAPI_RETURN_IF_ERROR(setKeyedOption(
      compileOptionTable(), "compile option", set->options, key, type, value));
  set->batchGiven |= std::string(key) == "batch";
  return nullptr;
}

struct Compilation {
  std::string text;
  bool isPlan = true;
  std::optional<std::string> report;
  std::string diagnostics;
};

HandleTable<Compilation> compilations("TrellisCompilation");

/// The rows of the first i32 input of @forward (the tokens), or 0.
int64_t forwardBatch(ModuleOp module) {
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward)
    return 0;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto role = forward.getArgAttrOfType<StringAttr>(
        i, graph::GraphDialect::kRoleAttrName);
    auto type = llvm::dyn_cast<RankedTensorType>(forward.getArgumentTypes()[i]);
    if (role && role.getValue() == "input" && type && type.getRank() == 2 &&
        type.getElementType().isInteger(32))
      return type.getDimSize(0);
  }
  return 0;
}

} // namespace

extern "C" {

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

static_assert(static_cast<int>(OptionType::Int) == TRELLIS_OPTION_INT &&
                  static_cast<int>(OptionType::Double) ==
                      TRELLIS_OPTION_DOUBLE &&
                  static_cast<int>(OptionType::String) ==
                      TRELLIS_OPTION_STRING &&
                  static_cast<int>(OptionType::Bool) == TRELLIS_OPTION_BOOL,
              "TrellisOptionType numbers OptionType");

size_t trellisCompileOptionCount(void) { return compileOptionTable().size(); }

TrellisStatus trellisCompileOptionDescribe(size_t index, const char **key,
                                           TrellisOptionType *type,
                                           const char **help) {
  TRELLIS_CAPI_REQUIRE(key);
  TRELLIS_CAPI_REQUIRE(type);
  TRELLIS_CAPI_REQUIRE(help);
  return describeOption(compileOptionTable(), "compile option", index, key,
                        type, help);
}

TrellisStatus trellisCompileOptionsCreate(TrellisCompileOptions *options) {
  TRELLIS_CAPI_REQUIRE(options);
  options->id = compileOptions.insert(std::make_unique<CompileOptionSet>());
  return nullptr;
}

void trellisCompileOptionsDestroy(TrellisCompileOptions options) {
  compileOptions.erase(options.id);
}

TrellisStatus trellisCompileOptionsSetInt(TrellisCompileOptions options,
                                          const char *key, int64_t value) {
  OptionValue v;
  v.integer = value;
  return setCompileOption(options, key, OptionType::Int, v);
}

TrellisStatus trellisCompileOptionsSetDouble(TrellisCompileOptions options,
                                             const char *key, double value) {
  OptionValue v;
  v.number = value;
  return setCompileOption(options, key, OptionType::Double, v);
}

TrellisStatus trellisCompileOptionsSetString(TrellisCompileOptions options,
                                             const char *key,
                                             const char *value) {
  TRELLIS_CAPI_REQUIRE(value);
  OptionValue v;
  v.text = value;
  return setCompileOption(options, key, OptionType::String, v);
}

TrellisStatus trellisCompileOptionsSetBool(TrellisCompileOptions options,
                                           const char *key, int value) {
  OptionValue v;
  v.flag = value != 0;
  return setCompileOption(options, key, OptionType::Bool, v);
}

TrellisStatus trellisCompile(TrellisModel modelHandle,
                             TrellisCompileOptions optionsHandle,
                             TrellisCompilation *compilation) {
  TRELLIS_CAPI_REQUIRE(compilation);
  Model *model = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(models.lookup(modelHandle.id, model));
  CompileOptionSet *set = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compileOptions.lookup(optionsHandle.id, set));
  return guarded(__func__, [&]() -> TrellisStatus {
    CompileOptions options = set->options;
    if (!model->configText && !set->batchGiven)
      if (int64_t rows = forwardBatch(*model->module))
        options.batch = rows * options.microBatches;
    DiagnosticCapture capture(*model->context);
    auto sink = [&](MessageKind kind, const llvm::Twine &text) {
      capture.message(kind, text);
    };
    if (failed(checkCompileOptions(options, sink)))
      return capture.failure("invalid compile options");
    std::optional<LoadedModel> loaded = instantiate(
        *model, {options.batch / options.microBatches, options.seq}, capture);
    if (!loaded)
      return capture.failure("cannot import the model");
    TimingScope noTiming;
    FailureOr<CompiledModel> compiled =
        compileModel(std::move(*loaded), options, sink, noTiming);
    if (failed(compiled))
      return capture.failure("compilation failed");
    auto result = std::make_unique<Compilation>();
    result->text = std::move(compiled->text);
    result->isPlan = !options.emitMlir && !options.emitEstimate;
    if (options.report) {
      std::string json;
      llvm::raw_string_ostream os(json);
      os << llvm::formatv("{0:2}",
                          reportJson(compiled->modelParameters,
                                     compiled->meshAxes, compiled->reports));
      os.flush();
      result->report = std::move(json);
    }
    result->diagnostics = std::move(capture.others);
    compilation->id = compilations.insert(std::move(result));
    return nullptr;
  });
}

void trellisCompilationDestroy(TrellisCompilation compilation) {
  compilations.erase(compilation.id);
}

TrellisStatus trellisCompilationGetText(TrellisCompilation handle,
                                        TrellisStringCallback callback,
                                        void *userData) {
  TRELLIS_CAPI_REQUIRE(callback);
  Compilation *compilation = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compilations.lookup(handle.id, compilation));
  sendString(compilation->text, callback, userData);
  return nullptr;
}

TrellisStatus trellisCompilationWrite(TrellisCompilation handle,
                                      const char *path) {
  TRELLIS_CAPI_REQUIRE(path);
  Compilation *compilation = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compilations.lookup(handle.id, compilation));
  std::error_code error;
  llvm::raw_fd_ostream os(path, error);
  if (error)
    return errorStatus(std::string("cannot write '") + path +
                       "': " + error.message());
  os << compilation->text;
  os.close();
  if (os.has_error())
    return errorStatus(std::string("cannot write '") + path +
                       "': " + os.error().message());
  return nullptr;
}

TrellisStatus trellisCompilationGetReport(TrellisCompilation handle,
                                          TrellisStringCallback callback,
                                          void *userData) {
  TRELLIS_CAPI_REQUIRE(callback);
  Compilation *compilation = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compilations.lookup(handle.id, compilation));
  if (!compilation->report)
    return errorStatus("this plan was compiled without a report: set the "
                       "compile option 'report'");
  sendString(*compilation->report, callback, userData);
  return nullptr;
}

TrellisStatus trellisCompilationGetDiagnostics(TrellisCompilation handle,
                                               TrellisStringCallback callback,
                                               void *userData) {
  TRELLIS_CAPI_REQUIRE(callback);
  Compilation *compilation = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compilations.lookup(handle.id, compilation));
  sendString(compilation->diagnostics, callback, userData);
  return nullptr;
}

TrellisStatus trellisCompilationGetPlan(TrellisCompilation handle,
                                        TrellisPlan *plan) {
  TRELLIS_CAPI_REQUIRE(plan);
  Compilation *compilation = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compilations.lookup(handle.id, compilation));
  if (!compilation->isPlan)
    return errorStatus("this compilation emitted MLIR (compile option "
                       "'emit' 'mlir'), not a plan");
  return trellisPlanCreateFromText(compilation->text.data(),
                                   compilation->text.size(), plan);
}

TrellisStatus trellisPlanSearch(TrellisModel modelHandle,
                                TrellisCompileOptions optionsHandle,
                                const char *cluster, int64_t gpus, int64_t top,
                                const char *evaluate,
                                TrellisStringCallback callback,
                                void *userData) {
  TRELLIS_CAPI_REQUIRE(cluster);
  TRELLIS_CAPI_REQUIRE(callback);
  Model *model = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(models.lookup(modelHandle.id, model));
  CompileOptionSet *set = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(compileOptions.lookup(optionsHandle.id, set));
  return guarded(__func__, [&]() -> TrellisStatus {
    if (gpus < 1)
      return errorStatus("gpus: expected >= 1, found " + std::to_string(gpus));
    if (top < 1)
      return errorStatus("top: expected >= 1, found " + std::to_string(top));
    planner::PlanRequest request;
    std::string error;
    std::optional<planner::ClusterSpec> spec =
        planner::loadCluster(cluster, error);
    if (!spec)
      return errorStatus("cluster: " + error);
    request.cluster = std::move(*spec);
    // The planner compiles each candidate from text in a context of its
    // own: a config's text, or a module of fixed shapes printed.
    if (model->configText) {
      request.modelText = *model->configText;
      request.format = ModelFormat::Config;
    } else {
      llvm::raw_string_ostream os(request.modelText);
      model->module->print(os);
      request.format = ModelFormat::Mlir;
    }
    request.modelSource = model->sourceName;
    request.gpus = gpus;
    request.globalBatch = set->options.batch;
    request.seq = set->options.seq;
    request.precision = set->options.precision;
    request.top = top;
    planner::PlanConstraints constraints;
    if (evaluate && *evaluate) {
      std::optional<planner::PlanConstraints> parsed =
          planner::parsePlanConstraints(evaluate, error);
      if (!parsed)
        return errorStatus("evaluate: " + error);
      constraints = *parsed;
    }
    std::optional<planner::SearchResult> result =
        planner::searchPlans(request, constraints, error);
    if (!result)
      return errorStatus(error);
    std::string json;
    llvm::raw_string_ostream os(json);
    os << llvm::formatv("{0:2}", llvm::json::Value(planner::searchResultJson(
                                     request, *result)));
    os.flush();
    sendString(json, callback, userData);
    return nullptr;
  });
}

} // extern "C"
