//===- Compiler.cpp - Models, graph building and compiling in the C API ---===//

#include "trellis-c/Compiler.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "trellis/CAPI/Handles.h"
#include "trellis/Common/FileKind.h"
#include "trellis/Compiler/Compile.h"
#include "trellis/Compiler/DiagnosticText.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

using namespace mlir;
using namespace trellis;
using namespace trellis::capi;

namespace {

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

/// Collects a context's diagnostics while it lives: errors apart from the
/// warnings and remarks, each as the driver prints it.
class DiagnosticCapture {
public:
  explicit DiagnosticCapture(MLIRContext &context)
      : context_(context),
        id_(context.getDiagEngine().registerHandler([this](Diagnostic &d) {
          llvm::raw_string_ostream os(
              d.getSeverity() == DiagnosticSeverity::Error ? errors : others);
          printDiagnostic(d, os);
          return success();
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
  TrellisStatus failure(const std::string &fallback) const {
    std::string text = errors.empty() ? fallback : errors;
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    return errorStatus(text);
  }

  /// A status of "`context`: " and every error (`context` alone when none
  /// was reported).
  TrellisStatus failureIn(const std::string &context) const {
    std::string text = errors;
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    return errorStatus(text.empty() ? context : context + ": " + text);
  }

  std::string errors, others;

private:
  MLIRContext &context_;
  DiagnosticEngine::HandlerID id_;
};

//===----------------------------------------------------------------------===//
// Models and graphs
//===----------------------------------------------------------------------===//

std::unique_ptr<MLIRContext> makeContext() {
  auto context =
      std::make_unique<MLIRContext>(MLIRContext::Threading::DISABLED);
  loadCompilerDialects(*context);
  return context;
}

struct Model {
  std::unique_ptr<MLIRContext> context;
  /// A config (imported when compiled) ...
  std::optional<std::string> configText;
  /// ... or a module of fixed shapes.
  OwningOpRef<ModuleOp> module;
  std::string sourceName;
  llvm::json::Object metadata;
};

struct Graph {
  std::unique_ptr<MLIRContext> context;
  OwningOpRef<ModuleOp> module;
  func::FuncOp function;
  Block *body = nullptr;
  std::unique_ptr<OpBuilder> builder;
  std::vector<Value> values;
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  std::set<std::string> argumentNames;
  Location location;
  graph::PartAttr part;

  explicit Graph(std::unique_ptr<MLIRContext> owned)
      : context(std::move(owned)), location(UnknownLoc::get(context.get())) {}
};

HandleTable<Model> models("TrellisModel");
HandleTable<Graph> graphs("TrellisGraph");

/// A module of the model (a config imported at `shape`) in the model's
/// context, or nullopt after reporting why to `capture`.
std::optional<LoadedModel> instantiate(Model &model, const BatchShape &shape,
                                       DiagnosticCapture &capture) {
  auto sink = [&](MessageKind kind, const llvm::Twine &text) {
    capture.message(kind, text);
  };
  if (model.configText) {
    llvm::raw_string_ostream parseErrors(capture.errors);
    return loadModelText(*model.context, *model.configText,
                         ModelFormat::Config, model.sourceName, shape, sink,
                         parseErrors);
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
    return storeModel(std::move(context), std::nullopt, text.str(),
                      sourceName, handle);
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

Type elementType(MLIRContext &context, TrellisDType dtype) {
  Builder builder(&context);
  switch (dtype) {
  case TRELLIS_DTYPE_F32:
    return builder.getF32Type();
  case TRELLIS_DTYPE_BF16:
    return builder.getBF16Type();
  case TRELLIS_DTYPE_F16:
    return builder.getF16Type();
  case TRELLIS_DTYPE_I32:
    return builder.getI32Type();
  }
  return Type();
}

std::optional<TrellisDType> dtypeOf(Type type) {
  if (type.isF32())
    return TRELLIS_DTYPE_F32;
  if (type.isBF16())
    return TRELLIS_DTYPE_BF16;
  if (type.isF16())
    return TRELLIS_DTYPE_F16;
  if (type.isInteger(32))
    return TRELLIS_DTYPE_I32;
  return std::nullopt;
}

/// The tensor type of `rank` sizes and `dtype`, or a status saying which
/// part is wrong.
TrellisStatus tensorType(Graph &graph, const char *what, const char *name,
                         const int64_t *sizes, int64_t rank, TrellisDType dtype,
                         RankedTensorType &type) {
  std::string subject = std::string(what) + " \"" + name + "\"";
  Type element = elementType(*graph.context, dtype);
  if (!element)
    return errorStatus(subject + ": unknown dtype " +
                       std::to_string(static_cast<int>(dtype)) +
                       ": expected TRELLIS_DTYPE_F32, _BF16, _F16 or _I32");
  if (rank < 0 || (rank > 0 && !sizes))
    return errorStatus(subject + ": expected a rank >= 0 and its sizes, "
                                 "found rank " +
                       std::to_string(rank) +
                       (sizes ? std::string() : " and no sizes"));
  for (int64_t i = 0; i < rank; ++i)
    if (sizes[i] < 1)
      return errorStatus(subject + ": dimension " + std::to_string(i) +
                         " has size " + std::to_string(sizes[i]) +
                         ": expected a static size >= 1");
  type = RankedTensorType::get(llvm::ArrayRef<int64_t>(sizes, rank), element);
  return nullptr;
}

TrellisStatus addArgument(Graph &graph, const char *role, const char *name,
                          RankedTensorType type, const char *init,
                          int64_t *value) {
  if (!graph.argumentNames.insert(name).second)
    return errorStatus(std::string("a parameter or input named \"") + name +
                       "\" exists already: expected unique names");
  Builder builder(graph.context.get());
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr(graph::GraphDialect::kRoleAttrName,
                           builder.getStringAttr(role)),
      builder.getNamedAttr(graph::GraphDialect::kParamNameAttrName,
                           builder.getStringAttr(name))};
  if (init)
    attrs.push_back(builder.getNamedAttr(graph::GraphDialect::kInitAttrName,
                                         builder.getStringAttr(init)));
  graph.argTypes.push_back(type);
  graph.argAttrs.push_back(builder.getDictionaryAttr(attrs));
  graph.values.push_back(graph.body->addArgument(type, graph.location));
  *value = static_cast<int64_t>(graph.values.size()) - 1;
  return nullptr;
}

/// "zeros", "ones" or "normal:STD" with a finite STD >= 0.
bool validInit(llvm::StringRef init) {
  if (init == "zeros" || init == "ones")
    return true;
  if (!init.consume_front("normal:"))
    return false;
  double std = 0;
  return !init.getAsDouble(std) && std::isfinite(std) && std >= 0;
}

//===----------------------------------------------------------------------===//
// Compile options
//===----------------------------------------------------------------------===//

const OptionKeys<CompileOptions> &compileOptionKeys() {
  using O = CompileOptions;
  using V = OptionValue;
  static const OptionKeys<O> keys = {
      {"batch", {OptionType::Int, [](O &o, const V &v) { o.batch = v.integer; }}},
      {"seq", {OptionType::Int, [](O &o, const V &v) { o.seq = v.integer; }}},
      {"microbatches",
       {OptionType::Int,
        [](O &o, const V &v) { o.microBatches = v.integer; }}},
      {"dp", {OptionType::Int,
              [](O &o, const V &v) { o.dataParallel = v.integer; }}},
      {"tp", {OptionType::Int,
              [](O &o, const V &v) { o.tensorParallel = v.integer; }}},
      {"pp", {OptionType::Int, [](O &o, const V &v) { o.pipeline = v.integer; }}},
      {"cp", {OptionType::Int,
              [](O &o, const V &v) { o.contextParallel = v.integer; }}},
      {"chunks", {OptionType::Int,
                  [](O &o, const V &v) { o.chunks = v.integer; }}},
      {"zero", {OptionType::Int, [](O &o, const V &v) { o.zero = v.integer; }}},
      {"lr", {OptionType::Double,
              [](O &o, const V &v) { o.learningRate = v.number; }}},
      {"beta1", {OptionType::Double, [](O &o, const V &v) { o.beta1 = v.number; }}},
      {"beta2", {OptionType::Double, [](O &o, const V &v) { o.beta2 = v.number; }}},
      {"adam-eps",
       {OptionType::Double, [](O &o, const V &v) { o.epsilon = v.number; }}},
      {"weight-decay",
       {OptionType::Double, [](O &o, const V &v) { o.weightDecay = v.number; }}},
      {"bucket-mib",
       {OptionType::Double, [](O &o, const V &v) { o.bucketMiB = v.number; }}},
      {"mesh", {OptionType::String, [](O &o, const V &v) { o.mesh = v.text; }}},
      {"schedule",
       {OptionType::String, [](O &o, const V &v) { o.schedule = v.text; }}},
      {"pp-layers",
       {OptionType::String, [](O &o, const V &v) { o.stageLayers = v.text; }}},
      {"cp-kind",
       {OptionType::String, [](O &o, const V &v) { o.contextKind = v.text; }}},
      {"optimizer",
       {OptionType::String, [](O &o, const V &v) { o.optimizer = v.text; }}},
      {"precision",
       {OptionType::String, [](O &o, const V &v) { o.precision = v.text; }}},
      {"grad-reduce-dtype",
       {OptionType::String,
        [](O &o, const V &v) { o.gradReduceDtype = v.text; }}},
      {"recompute",
       {OptionType::String, [](O &o, const V &v) { o.recompute = v.text; }}},
      {"emit", {OptionType::String,
                [](O &o, const V &v) { o.emitMlir = v.text == "mlir"; }}},
      {"sp", {OptionType::Bool,
              [](O &o, const V &v) { o.sequenceParallel = v.flag; }}},
      {"decay-1d", {OptionType::Bool,
                    [](O &o, const V &v) { o.decayOneDimensional = v.flag; }}},
      {"fuse", {OptionType::Bool, [](O &o, const V &v) { o.fuse = v.flag; }}},
      {"explain",
       {OptionType::Bool, [](O &o, const V &v) { o.explain = v.flag; }}},
      {"report", {OptionType::Bool, [](O &o, const V &v) { o.report = v.flag; }}},
  };
  return keys;
}

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
  if (std::string(key) == "emit" && type == OptionType::String &&
      value.text != "plan" && value.text != "mlir")
    return errorStatus("compile option 'emit': expected plan or mlir, found '" +
                       value.text + "'");
  TRELLIS_CAPI_RETURN_IF_ERROR(setKeyedOption(
      compileOptionKeys(), "compile option", set->options, key, type, value));
  set->batchGiven |= std::string(key) == "batch";
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Compilations
//===----------------------------------------------------------------------===//

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
// Models
//===----------------------------------------------------------------------===//

TrellisStatus trellisModelCreateFromFile(const char *path, TrellisModel *model) {
  TRELLIS_CAPI_REQUIRE(path);
  TRELLIS_CAPI_REQUIRE(model);
  return guarded(__func__, [&]() -> TrellisStatus {
    std::string text;
    if (std::string why = readRegularFile(path, text); !why.empty())
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

//===----------------------------------------------------------------------===//
// Graphs
//===----------------------------------------------------------------------===//

TrellisStatus trellisGraphCreate(TrellisGraph *handle) {
  TRELLIS_CAPI_REQUIRE(handle);
  return guarded(__func__, [&]() -> TrellisStatus {
    auto graph = std::make_unique<Graph>(makeContext());
    graph->builder = std::make_unique<OpBuilder>(graph->context.get());
    graph->module = ModuleOp::create(graph->location);
    graph->function = func::FuncOp::create(
        graph->location, "forward", graph->builder->getFunctionType({}, {}));
    graph->module->push_back(graph->function);
    graph->body = graph->function.addEntryBlock();
    graph->builder->setInsertionPointToStart(graph->body);
    handle->id = graphs.insert(std::move(graph));
    return nullptr;
  });
}

void trellisGraphDestroy(TrellisGraph graph) { graphs.erase(graph.id); }

TrellisStatus trellisGraphAddParameter(TrellisGraph handle, const char *name,
                                       const int64_t *sizes, int64_t rank,
                                       TrellisDType dtype, const char *init,
                                       int64_t *value) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(init);
  TRELLIS_CAPI_REQUIRE(value);
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  RankedTensorType type;
  TRELLIS_CAPI_RETURN_IF_ERROR(
      tensorType(*graph, "parameter", name, sizes, rank, dtype, type));
  if (dtype == TRELLIS_DTYPE_I32)
    return errorStatus(std::string("parameter \"") + name +
                       "\": expected a floating-point dtype, found i32");
  if (!validInit(init))
    return errorStatus(std::string("parameter \"") + name + "\": init '" +
                       init +
                       "': expected zeros, ones or normal:STD (STD >= 0)");
  return addArgument(*graph, "param", name, type, init, value);
}

TrellisStatus trellisGraphSetFileShape(TrellisGraph handle, int64_t value,
                                       const int64_t *sizes, int64_t rank) {
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  if (value < 0 || value >= static_cast<int64_t>(graph->values.size()) ||
      !llvm::isa<BlockArgument>(graph->values[value]))
    return errorStatus("trellisGraphSetFileShape: value " +
                       std::to_string(value) + " is not a parameter");
  unsigned index = llvm::cast<BlockArgument>(graph->values[value]).getArgNumber();
  DictionaryAttr attrs = graph->argAttrs[index];
  auto role = attrs.getAs<StringAttr>(graph::GraphDialect::kRoleAttrName);
  if (!role || role.getValue() != "param")
    return errorStatus("trellisGraphSetFileShape: value " +
                       std::to_string(value) + " is an input, expected a "
                       "parameter");
  if (rank < 1 || !sizes)
    return errorStatus("trellisGraphSetFileShape: expected a rank >= 1 and "
                       "its sizes, found rank " +
                       std::to_string(rank));
  auto type = llvm::cast<RankedTensorType>(graph->argTypes[index]);
  int64_t elements = 1;
  for (int64_t i = 0; i < rank; ++i)
    elements *= sizes[i];
  if (elements != type.getNumElements())
    return errorStatus("trellisGraphSetFileShape: the parameter has " +
                       std::to_string(type.getNumElements()) +
                       " elements, the file shape " +
                       std::to_string(elements));
  NamedAttrList list(attrs);
  Builder builder(graph->context.get());
  list.set(graph::GraphDialect::kFileShapeAttrName,
           builder.getDenseI64ArrayAttr(llvm::ArrayRef<int64_t>(sizes, rank)));
  graph->argAttrs[index] = list.getDictionary(graph->context.get());
  return nullptr;
}

TrellisStatus trellisGraphAddInput(TrellisGraph handle, const char *name,
                                   const int64_t *sizes, int64_t rank,
                                   TrellisDType dtype, int64_t *value) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(value);
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  RankedTensorType type;
  TRELLIS_CAPI_RETURN_IF_ERROR(
      tensorType(*graph, "input", name, sizes, rank, dtype, type));
  return addArgument(*graph, "input", name, type, nullptr, value);
}

TrellisStatus trellisGraphSetPart(TrellisGraph handle, TrellisPartKind kind,
                                  int64_t layer) {
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  MLIRContext *context = graph->context.get();
  switch (kind) {
  case TRELLIS_PART_NONE:
    graph->part = {};
    return nullptr;
  case TRELLIS_PART_EMBEDDING:
    graph->part = graph::PartAttr::getEmbedding(context);
    return nullptr;
  case TRELLIS_PART_HEAD:
    graph->part = graph::PartAttr::getHead(context);
    return nullptr;
  case TRELLIS_PART_LAYER:
    if (layer < 0)
      return errorStatus("trellisGraphSetPart: expected a layer index >= 0, "
                         "found " +
                         std::to_string(layer));
    graph->part = graph::PartAttr::getLayer(context, layer);
    return nullptr;
  }
  return errorStatus("trellisGraphSetPart: unknown part kind " +
                     std::to_string(static_cast<int>(kind)));
}

TrellisStatus trellisGraphSetLocation(TrellisGraph handle, const char *name,
                                      const char *file, int64_t line) {
  TRELLIS_CAPI_REQUIRE(name);
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  MLIRContext *context = graph->context.get();
  StringAttr nameAttr = StringAttr::get(context, name);
  // A source position prints as file:line:col; the name then stays in
  // the location for tools that show it.
  graph->location =
      file ? Location(FileLineColLoc::get(
                 context, file, static_cast<unsigned>(std::max<int64_t>(line, 0)),
                 0))
           : Location(NameLoc::get(nameAttr));
  if (file)
    graph->location = NameLoc::get(nameAttr, graph->location);
  return nullptr;
}

TrellisStatus trellisGraphAddOp(TrellisGraph handle, const char *opName,
                                const int64_t *operands, int64_t numOperands,
                                const char *attributes, int64_t *results,
                                int64_t capacity, int64_t *numResults) {
  TRELLIS_CAPI_REQUIRE(opName);
  TRELLIS_CAPI_REQUIRE(numResults);
  if (numOperands > 0)
    TRELLIS_CAPI_REQUIRE(operands);
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  return guarded(__func__, [&]() -> TrellisStatus {
    MLIRContext *context = graph->context.get();
    std::string op = opName;
    std::optional<RegisteredOperationName> info =
        RegisteredOperationName::lookup(op, context);
    if (!info || info->getDialectNamespace() != "graph" ||
        !info->hasInterface<InferTypeOpInterface>())
      return errorStatus("unknown graph op '" + op +
                         "': expected an op of the graph dialect, such as "
                         "graph.matmul");
    SmallVector<Value> inputs;
    for (int64_t i = 0; i < numOperands; ++i) {
      if (operands[i] < 0 ||
          operands[i] >= static_cast<int64_t>(graph->values.size()))
        return errorStatus(op + ": operand " + std::to_string(i) + " is value " +
                           std::to_string(operands[i]) +
                           ", expected a value in [0, " +
                           std::to_string(graph->values.size()) + ")");
      inputs.push_back(graph->values[operands[i]]);
    }
    DiagnosticCapture capture(*context);
    DictionaryAttr dictionary = DictionaryAttr::get(context);
    if (attributes && *attributes) {
      size_t read = 0;
      Attribute parsed = parseAttribute(attributes, context, Type(), &read);
      dictionary = llvm::dyn_cast_or_null<DictionaryAttr>(parsed);
      if (!dictionary || read != std::strlen(attributes))
        return capture.failureIn(
            op + ": cannot parse the attributes '" + std::string(attributes) +
            "' (expected an MLIR attribute dictionary such as "
            "{transpose_rhs})");
    }
    // The inherent attributes as the op's properties, then its result
    // types from them (every graph op infers them).
    std::vector<char> storage(std::max(info->getOpPropertyByteSize(), 1) + 16);
    void *aligned = storage.data() + (16 - reinterpret_cast<uintptr_t>(
                                               storage.data()) % 16) % 16;
    OpaqueProperties properties(info->getOpPropertyByteSize() ? aligned
                                                              : nullptr);
    if (properties)
      info->initOpProperties(properties, OpaqueProperties(nullptr));
    llvm::scope_exit destroyProperties([&] {
      if (properties)
        info->destroyOpProperties(properties);
    });
    Location location = graph->location;
    if (properties &&
        failed(info->setOpPropertiesFromAttribute(
            *info, properties, dictionary,
            [&] { return emitError(location); })))
      return capture.failureIn(op);
    // Every graph op infers its result types (Graph_Op's traits).
    auto *inference = info->getInterface<InferTypeOpInterface>();
    SmallVector<Type> types;
    if (failed(inference->inferReturnTypes(context, location, inputs,
                                           dictionary, properties,
                                           RegionRange(), types)))
      return capture.failureIn(op);
    OperationState state(location, *info);
    state.addOperands(inputs);
    state.addTypes(types);
    if (properties)
      state.propertiesAttr = dictionary;
    else
      state.addAttributes(dictionary.getValue());
    if (graph->part)
      state.addAttribute(graph::GraphDialect::kPartAttrName, graph->part);
    Operation *created = graph->builder->create(state);
    if (failed(verify(created))) {
      created->erase();
      return capture.failureIn(op);
    }
    int64_t count = created->getNumResults();
    *numResults = count;
    if (count > capacity || (count > 0 && !results)) {
      created->erase();
      return errorStatus(op + " has " + std::to_string(count) +
                         " results, found room for " +
                         std::to_string(results ? capacity : 0));
    }
    for (Value result : created->getResults()) {
      graph->values.push_back(result);
      *results++ = static_cast<int64_t>(graph->values.size()) - 1;
    }
    return nullptr;
  });
}

TrellisStatus trellisGraphGetValueType(TrellisGraph handle, int64_t value,
                                       int64_t *sizes, int64_t capacity,
                                       int64_t *rank, TrellisDType *dtype) {
  TRELLIS_CAPI_REQUIRE(rank);
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  if (value < 0 || value >= static_cast<int64_t>(graph->values.size()))
    return errorStatus("trellisGraphGetValueType: expected a value in [0, " +
                       std::to_string(graph->values.size()) + "), found " +
                       std::to_string(value));
  auto type = llvm::cast<RankedTensorType>(graph->values[value].getType());
  *rank = type.getRank();
  if (*rank > capacity || (*rank > 0 && !sizes))
    return errorStatus("trellisGraphGetValueType: value " +
                       std::to_string(value) + " has rank " +
                       std::to_string(*rank) + ", found room for " +
                       std::to_string(sizes ? capacity : 0) + " sizes");
  std::copy(type.getShape().begin(), type.getShape().end(), sizes);
  if (dtype)
    *dtype = dtypeOf(type.getElementType()).value_or(TRELLIS_DTYPE_F32);
  return nullptr;
}

TrellisStatus trellisGraphFinish(TrellisGraph handle, int64_t loss,
                                 TrellisModel *model) {
  TRELLIS_CAPI_REQUIRE(model);
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  if (loss < 0 || loss >= static_cast<int64_t>(graph->values.size()))
    return errorStatus("trellisGraphFinish: the loss is value " +
                       std::to_string(loss) + ", expected a value in [0, " +
                       std::to_string(graph->values.size()) + ")");
  Value result = graph->values[loss];
  auto type = llvm::cast<RankedTensorType>(result.getType());
  if (type.getRank() != 0 || !type.getElementType().isF32()) {
    std::string found;
    llvm::raw_string_ostream os(found);
    os << type;
    return errorStatus("trellisGraphFinish: expected the loss to be a "
                       "scalar tensor<f32>, found " +
                       os.str());
  }
  return guarded(__func__, [&]() -> TrellisStatus {
    DiagnosticCapture capture(*graph->context);
    func::ReturnOp::create(*graph->builder, graph->location, result);
    graph->function.setType(
        graph->builder->getFunctionType(graph->argTypes, result.getType()));
    graph->function.setAllArgAttrs(graph->argAttrs);
    if (failed(verify(*graph->module))) {
      graph->body->getTerminator()->erase();
      return capture.failure("the graph is invalid");
    }
    LoadedModel loaded;
    loaded.module = std::move(graph->module);
    loaded.metadata["source"] = "graph builder";
    graph->body = nullptr;
    std::unique_ptr<MLIRContext> context = std::move(graph->context);
    graph->builder.reset();
    TRELLIS_CAPI_RETURN_IF_ERROR(storeModel(std::move(context),
                                            std::move(loaded), std::nullopt,
                                            "graph builder", model));
    graphs.erase(handle.id);
    return nullptr;
  });
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

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
    result->isPlan = !options.emitMlir;
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

} // extern "C"
