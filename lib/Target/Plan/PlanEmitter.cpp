//===- PlanEmitter.cpp - Training step to plan file -----------------------===//

#include "trellis/Target/Plan/PlanEmitter.h"

#include "trellis/Dialect/Graph/IR/GraphOps.h"

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

llvm::json::Array shapeArray(ArrayRef<int64_t> shape) {
  llvm::json::Array array;
  for (int64_t size : shape)
    array.push_back(size);
  return array;
}

/// The plan's name of a tensor element type, or empty if unsupported.
StringRef dtypeName(Type type) {
  if (type.isF32())
    return "f32";
  if (type.isInteger(32))
    return "i32";
  return "";
}

/// Converts an op attribute to JSON, or nullopt if it has no plan form.
std::optional<llvm::json::Value> attributeToJson(Attribute attr) {
  if (llvm::isa<UnitAttr>(attr))
    return llvm::json::Value(true);
  if (auto flag = llvm::dyn_cast<BoolAttr>(attr))
    return llvm::json::Value(flag.getValue());
  if (auto function = llvm::dyn_cast<UnaryFunctionAttr>(attr))
    return llvm::json::Value(stringifyUnaryFunction(function.getValue()).str());
  if (auto integer = llvm::dyn_cast<IntegerAttr>(attr))
    return llvm::json::Value(integer.getInt());
  if (auto real = llvm::dyn_cast<FloatAttr>(attr))
    return llvm::json::Value(real.getValueAsDouble());
  if (auto ints = llvm::dyn_cast<DenseI64ArrayAttr>(attr))
    return llvm::json::Value(shapeArray(ints.asArrayRef()));
  if (auto reals = llvm::dyn_cast<DenseF64ArrayAttr>(attr)) {
    llvm::json::Array array;
    for (double value : reals.asArrayRef())
      array.push_back(value);
    return llvm::json::Value(std::move(array));
  }
  return std::nullopt;
}

class Emitter {
public:
  FailureOr<llvm::json::Value> emit(func::FuncOp step, PlanMetadata metadata);

private:
  /// Assigns a buffer to `value` (once).
  FailureOr<int64_t> defineBuffer(Value value, Operation *where);

  DenseMap<Value, int64_t> bufferIds_;
  llvm::json::Array buffers_;
};

FailureOr<int64_t> Emitter::defineBuffer(Value value, Operation *where) {
  auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
  StringRef dtype = type ? dtypeName(type.getElementType()) : "";
  if (!type || !type.hasStaticShape() || dtype.empty())
    return where->emitError() << "the plan holds static tensors of f32 or i32,"
                              << " found " << value.getType();
  int64_t id = buffers_.size();
  buffers_.push_back(llvm::json::Object{{"shape", shapeArray(type.getShape())},
                                        {"dtype", dtype}});
  bufferIds_[value] = id;
  return id;
}

FailureOr<llvm::json::Value> Emitter::emit(func::FuncOp step,
                                           PlanMetadata metadata) {
  if (!llvm::hasSingleElement(step.getBody()))
    return step.emitError("expected a function with a single block");
  Block &body = step.getBody().front();

  llvm::json::Array arguments;
  for (BlockArgument arg : body.getArguments()) {
    FailureOr<int64_t> id = defineBuffer(arg, step);
    if (failed(id))
      return failure();
    llvm::json::Object entry{{"buffer", *id}};
    for (StringRef key : {GraphDialect::kRoleAttrName,
                          GraphDialect::kParamNameAttrName,
                          GraphDialect::kInitAttrName}) {
      auto text = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), key);
      if (text)
        entry[key.drop_front(strlen("graph."))] = text.getValue().str();
    }
    if (!entry.get("role"))
      return step.emitError() << "argument " << arg.getArgNumber()
                              << " has no graph.role";
    arguments.push_back(std::move(entry));
  }

  llvm::json::Array program;
  for (Operation &op : body.without_terminator()) {
    if (!llvm::isa<GraphDialect>(op.getDialect()))
      return op.emitError() << "the plan executes graph ops only, found '"
                            << op.getName() << "'";
    llvm::json::Array inputs, outputs;
    for (Value operand : op.getOperands())
      inputs.push_back(bufferIds_.lookup(operand));
    for (Value result : op.getResults()) {
      FailureOr<int64_t> id = defineBuffer(result, &op);
      if (failed(id))
        return failure();
      outputs.push_back(*id);
    }
    llvm::json::Object attrs;
    auto inherent = llvm::dyn_cast_if_present<DictionaryAttr>(
        op.getPropertiesAsAttribute());
    for (NamedAttribute named :
         inherent ? inherent.getValue() : ArrayRef<NamedAttribute>()) {
      std::optional<llvm::json::Value> value =
          attributeToJson(named.getValue());
      if (!value)
        return op.emitError() << "attribute '" << named.getName().getValue()
                              << "' has no plan form";
      attrs[named.getName().getValue()] = std::move(*value);
    }
    program.push_back(llvm::json::Object{
        {"op", op.getName().stripDialect().str()},
        {"inputs", std::move(inputs)},
        {"outputs", std::move(outputs)},
        {"attrs", std::move(attrs)},
    });
  }

  llvm::json::Array results;
  Operation *terminator = body.getTerminator();
  for (auto [index, value] : llvm::enumerate(terminator->getOperands())) {
    auto it = bufferIds_.find(value);
    if (it == bufferIds_.end())
      return step.emitError("a result is not produced by the program");
    llvm::json::Object entry{{"buffer", it->second}};
    if (auto updates = step.getResultAttrOfType<IntegerAttr>(
            index, GraphDialect::kUpdatesAttrName))
      entry["updates"] = updates.getInt();
    else if (auto gradientOf = step.getResultAttrOfType<IntegerAttr>(
                 index, "graph.gradient_of"))
      entry["gradient_of"] = gradientOf.getInt();
    else if (index == 0)
      entry["role"] = "loss";
    results.push_back(std::move(entry));
  }

  return llvm::json::Value(llvm::json::Object{
      {"format", "trellis-plan"},
      {"version", kPlanFormatVersion},
      {"metadata", std::move(metadata.fields)},
      {"mesh", llvm::json::Array{llvm::json::Object{{"name", "dp"},
                                                    {"size", 1}}}},
      {"buffers", std::move(buffers_)},
      {"arguments", std::move(arguments)},
      {"results", std::move(results)},
      {"stages", llvm::json::Array{llvm::json::Object{
                     {"stage", 0}, {"program", std::move(program)}}}},
  });
}

} // namespace

FailureOr<llvm::json::Value> trellis::emitPlan(func::FuncOp step,
                                               PlanMetadata metadata) {
  return Emitter().emit(step, std::move(metadata));
}
