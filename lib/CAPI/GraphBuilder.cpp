//===- GraphBuilder.cpp - Graphs built op by op in the C API --------------===//
//
// A graph's arguments, ops, parts and locations added one call at a time;
// finishing it makes a model.
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
#include "trellis/Common/OpContract.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
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

namespace {

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

HandleTable<Graph> graphs("TrellisGraph");

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
    return errorStatus(subject +
                       ": expected a rank >= 0 and its sizes, "
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

/// The graph of `handle` and the type of a new argument of it (`what`
/// names it in errors).
TrellisStatus argumentType(TrellisGraph handle, const char *what,
                           const char *name, const int64_t *sizes, int64_t rank,
                           TrellisDType dtype, Graph *&graph,
                           RankedTensorType &type) {
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  return tensorType(*graph, what, name, sizes, rank, dtype, type);
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

} // namespace

extern "C" {

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
  RankedTensorType type;
  TRELLIS_CAPI_RETURN_IF_ERROR(
      argumentType(handle, "parameter", name, sizes, rank, dtype, graph, type));
  if (dtype == TRELLIS_DTYPE_I32)
    return errorStatus(std::string("parameter \"") + name +
                       "\": expected a floating-point dtype, found i32");
  if (!validInit(init))
    return errorStatus(std::string("parameter \"") + name + "\": init '" +
                       init +
                       "': expected zeros, ones or normal:STD (STD >= 0)");
  return addArgument(*graph, "param", name, type, init, value);
}

TrellisStatus trellisGraphAddState(TrellisGraph handle, const char *name,
                                   const int64_t *sizes, int64_t rank,
                                   int64_t *value) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(value);
  Graph *graph = nullptr;
  RankedTensorType type;
  TRELLIS_CAPI_RETURN_IF_ERROR(argumentType(handle, "state", name, sizes, rank,
                                            TRELLIS_DTYPE_F32, graph, type));
  return addArgument(*graph, "state", name, type, "zeros", value);
}

TrellisStatus trellisGraphSetFileShape(TrellisGraph handle, int64_t value,
                                       const int64_t *sizes, int64_t rank) {
  Graph *graph = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(graphs.lookup(handle.id, graph));
  if (value < 0 || value >= static_cast<int64_t>(graph->values.size()) ||
      !llvm::isa<BlockArgument>(graph->values[value]))
    return errorStatus("trellisGraphSetFileShape: value " +
                       std::to_string(value) + " is not a parameter");
  unsigned index =
      llvm::cast<BlockArgument>(graph->values[value]).getArgNumber();
  DictionaryAttr attrs = graph->argAttrs[index];
  auto role = attrs.getAs<StringAttr>(graph::GraphDialect::kRoleAttrName);
  if (!role || role.getValue() != "param")
    return errorStatus("trellisGraphSetFileShape: value " +
                       std::to_string(value) +
                       " is an input, expected a "
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
                       " elements, the file shape " + std::to_string(elements));
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
  RankedTensorType type;
  TRELLIS_CAPI_RETURN_IF_ERROR(
      argumentType(handle, "input", name, sizes, rank, dtype, graph, type));
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
                 context, file,
                 static_cast<unsigned>(std::max<int64_t>(line, 0)), 0))
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
        return errorStatus(op + ": operand " + std::to_string(i) +
                           " is value " + std::to_string(operands[i]) +
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
    // An op with several optional operands (attention's slopes and sinks)
    // given none of them need not say so: its required operands, each
    // once.
    if (info->hasTrait<OpTrait::AttrSizedOperandSegments>() &&
        !dictionary.get("operandSegmentSizes")) {
      const OpContract *contract = findOpContract(
          graph::planOpName(info->getStringRef().drop_front(strlen("graph.")))
              .str());
      SmallVector<int32_t> segments;
      for (const OperandSpec &spec :
           contract ? contract->operands : std::vector<OperandSpec>())
        segments.push_back(spec.optional ? 0 : 1);
      if (static_cast<int64_t>(llvm::count(segments, 1)) != numOperands)
        return errorStatus(
            op + ": with " + std::to_string(numOperands) +
            " operands, say which optional operands they include in "
            "operandSegmentSizes (one count per operand of the op, such as "
            "array<i32: 1, 1, 1, 0, 1>)");
      NamedAttrList named(dictionary);
      named.set("operandSegmentSizes",
                DenseI32ArrayAttr::get(context, segments));
      dictionary = named.getDictionary(context);
    }
    // The inherent attributes as the op's properties, then its result
    // types from them (every graph op infers them).
    std::vector<char> storage(std::max(info->getOpPropertyByteSize(), 1) + 16);
    void *aligned =
        storage.data() +
        (16 - reinterpret_cast<uintptr_t>(storage.data()) % 16) % 16;
    OpaqueProperties properties(info->getOpPropertyByteSize() ? aligned
                                                              : nullptr);
    if (properties)
      info->initOpProperties(properties, OpaqueProperties(nullptr));
    llvm::scope_exit destroyProperties([&] {
      if (properties)
        info->destroyOpProperties(properties);
    });
    Location location = graph->location;
    if (properties && failed(info->setOpPropertiesFromAttribute(
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

} // extern "C"
