//===- GraphContract.cpp - Graph ops and the plan op contract -------------===//

#include "trellis/Dialect/Graph/IR/GraphContract.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphEnums.h"
#include "trellis/Dialect/Graph/IR/GraphInterfaces.h"

using namespace mlir;

namespace trellis::graph {

StringRef planOpName(StringRef mnemonic) {
  return mnemonic == "microbatch_sum" ? StringRef("accumulate") : mnemonic;
}

std::optional<AttrValue> toContractAttr(Attribute attr) {
  AttrValue value;
  if (llvm::isa<UnitAttr>(attr)) {
    value.kind = AttrKind::Bool;
    value.flag = true;
  } else if (auto flag = llvm::dyn_cast<BoolAttr>(attr)) {
    value.kind = AttrKind::Bool;
    value.flag = flag.getValue();
  } else if (auto function = llvm::dyn_cast<UnaryFunctionAttr>(attr)) {
    value.kind = AttrKind::String;
    value.text = stringifyUnaryFunction(function.getValue()).str();
  } else if (auto integer = llvm::dyn_cast<IntegerAttr>(attr)) {
    value.kind = AttrKind::Int;
    value.integer = integer.getInt();
  } else if (auto real = llvm::dyn_cast<FloatAttr>(attr)) {
    value.kind = AttrKind::Real;
    value.real = real.getValueAsDouble();
  } else if (auto ints = llvm::dyn_cast<DenseI64ArrayAttr>(attr)) {
    value.kind = AttrKind::Ints;
    value.ints.assign(ints.asArrayRef().begin(), ints.asArrayRef().end());
  } else if (auto ints = llvm::dyn_cast<DenseI32ArrayAttr>(attr)) {
    // operandSegmentSizes: which optional operands an op has.
    value.kind = AttrKind::Ints;
    value.ints.assign(ints.asArrayRef().begin(), ints.asArrayRef().end());
  } else if (auto reals = llvm::dyn_cast<DenseF64ArrayAttr>(attr)) {
    value.kind = AttrKind::Reals;
    value.reals.assign(reals.asArrayRef().begin(), reals.asArrayRef().end());
  } else if (auto array = llvm::dyn_cast<ArrayAttr>(attr)) {
    value.kind = AttrKind::Strings;
    for (Attribute element : array) {
      auto name = llvm::dyn_cast<StringAttr>(element);
      if (!name)
        return std::nullopt;
      value.texts.push_back(name.getValue().str());
    }
  } else if (auto text = llvm::dyn_cast<StringAttr>(attr)) {
    value.kind = AttrKind::String;
    value.text = text.getValue().str();
  } else {
    return std::nullopt;
  }
  return value;
}

std::optional<ElementType> toElementType(Type type) {
  if (type.isF32())
    return ElementType::F32;
  if (type.isBF16())
    return ElementType::BF16;
  if (type.isF16())
    return ElementType::F16;
  if (type.isInteger(32))
    return ElementType::I32;
  return std::nullopt;
}

Type fromElementType(MLIRContext *context, ElementType type) {
  switch (type) {
  case ElementType::F32:
    return Float32Type::get(context);
  case ElementType::BF16:
    return BFloat16Type::get(context);
  case ElementType::F16:
    return Float16Type::get(context);
  case ElementType::I32:
    return IntegerType::get(context, 32);
  }
  return Float32Type::get(context);
}

LogicalResult inferFromContract(StringRef planName, MLIRContext *context,
                                std::optional<Location> loc,
                                ValueRange operands, DictionaryAttr inherent,
                                DictionaryAttr attributes,
                                SmallVectorImpl<Type> &types) {
  const OpContract *contract = findOpContract(planName.str());
  if (!contract)
    return emitOptionalError(loc, "op '", planName, "' has no plan contract");
  std::vector<TensorType> inputs;
  for (auto [index, operand] : llvm::enumerate(operands)) {
    auto type = llvm::dyn_cast<RankedTensorType>(operand.getType());
    std::optional<ElementType> element =
        type ? toElementType(type.getElementType()) : std::nullopt;
    if (!type || !type.hasStaticShape() || !element)
      return emitOptionalError(loc, "expected operand ", index,
                               " to be a static tensor of f32, bf16, f16 or "
                               "i32, found ",
                               operand.getType());
    inputs.push_back({std::vector<int64_t>(type.getShape().begin(),
                                           type.getShape().end()),
                      *element});
  }
  // The contract's attributes, from the properties or, while parsing,
  // from the attribute dictionary (moved into properties afterwards).
  AttrMap attrs;
  for (const AttrSpec &spec : contract->attrs) {
    Attribute attr = inherent ? inherent.get(spec.name) : Attribute();
    if (!attr && attributes)
      attr = attributes.get(spec.name);
    if (!attr)
      continue;
    std::optional<AttrValue> value = toContractAttr(attr);
    if (!value)
      return emitOptionalError(loc, "attribute '", spec.name,
                               "' has no plan form, found ", attr);
    attrs[spec.name] = std::move(*value);
  }
  std::vector<TensorType> results;
  if (Diagnostic diagnostic =
          inferResults(*contract, OpInstance(inputs, attrs), results))
    return emitOptionalError(loc, *diagnostic);
  for (const TensorType &result : results)
    types.push_back(RankedTensorType::get(
        result.shape, fromElementType(context, result.element)));
  return success();
}

const OpContract *contractOf(Operation *op) {
  if (!llvm::isa_and_nonnull<GraphDialect>(op->getDialect()))
    return nullptr;
  return findOpContract(planOpName(op->getName().stripDialect()).str());
}

bool isUpdate(Operation *op) {
  const OpContract *contract = contractOf(op);
  return contract && contract->isUpdate();
}

bool makesStepTotal(Operation *op) {
  const OpContract *contract = contractOf(op);
  return contract && contract->effects.accumulates;
}

namespace {

/// A verified graph op's value type as the table holds it.
TensorType tableType(Type type) {
  auto tensor = llvm::cast<RankedTensorType>(type);
  return {std::vector<int64_t>(tensor.getShape().begin(),
                               tensor.getShape().end()),
          toElementType(tensor.getElementType()).value_or(ElementType::F32)};
}

/// A verified graph op as its row's rules see it.
struct TableInstance {
  const OpContract *contract = nullptr;
  std::vector<TensorType> inputs, results;
  AttrMap attrs;

  explicit TableInstance(Operation *op) : contract(contractOf(op)) {
    for (Type type : op->getOperandTypes())
      inputs.push_back(tableType(type));
    for (Type type : op->getResultTypes())
      results.push_back(tableType(type));
    if (!contract)
      return;
    for (const AttrSpec &spec : contract->attrs)
      if (Attribute attr = op->getAttr(spec.name))
        if (std::optional<AttrValue> value = toContractAttr(attr))
          attrs[spec.name] = std::move(*value);
  }

  OpInstance instance() const { return OpInstance(inputs, attrs, results); }
};

} // namespace

ShardingRule shardingRuleFromContract(Operation *op) {
  TableInstance table(op);
  if (!table.contract || !table.contract->factors)
    return ShardingRule();
  ShardingRule rule = table.contract->factors(table.instance());
  // Partial values are reduced before an op marked graph.reduce_first.
  if (op->hasAttr(GraphDialect::kReduceFirstAttrName))
    rule.linear = false;
  return rule;
}

OpCost costFromContract(Operation *op) {
  TableInstance table(op);
  if (!table.contract)
    return elementwiseCost(table.instance(), 1);
  return table.contract->cost(table.instance());
}

OpCost costWithShapes(Operation *op,
                      ArrayRef<SmallVector<int64_t>> operandShapes,
                      ArrayRef<SmallVector<int64_t>> resultShapes) {
  TableInstance table(op);
  for (auto [type, shape] : llvm::zip(table.inputs, operandShapes))
    type.shape.assign(shape.begin(), shape.end());
  for (auto [type, shape] : llvm::zip(table.results, resultShapes))
    type.shape.assign(shape.begin(), shape.end());
  if (!table.contract)
    return elementwiseCost(table.instance(), 1);
  return table.contract->cost(table.instance());
}

PrecisionPolicy precisionFromContract(Operation *op) {
  const OpContract *contract = contractOf(op);
  return contract ? contract->precision : PrecisionPolicy::Low;
}

} // namespace trellis::graph
