//===- OpContract.cpp - Checking an op instance against its contract ------===//

#include "trellis/Common/OpContract.h"

#include "OpTable.h"

#include <algorithm>
#include <unordered_map>

namespace trellis {

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F16:
    return "f16";
  case ElementType::I32:
    return "i32";
  }
  return "?";
}

bool kernelCommunicates(
    const OpContract *contract, bool overAxes,
    const std::function<std::string(const std::string &)> &attribute) {
  if (!contract || !overAxes)
    return false;
  const OpEffects &effects = contract->effects;
  if (effects.reducesOverAxes)
    return true;
  return !effects.exchangesWhen.first.empty() &&
         attribute(effects.exchangesWhen.first) == effects.exchangesWhen.second;
}

int64_t elementTypeBytes(ElementType type) {
  return type == ElementType::BF16 || type == ElementType::F16 ? 2 : 4;
}

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

int64_t tensorBytes(const TensorType &type) {
  return elementCount(type.shape) * elementTypeBytes(type.element);
}

OpCost elementwiseCost(const OpInstance &instance, double flopsPerElement) {
  OpCost cost;
  for (size_t i = 0; i < instance.numInputs(); ++i)
    cost.bytesRead += tensorBytes(instance.input(i));
  for (size_t i = 0; i < instance.numResults(); ++i) {
    cost.bytesWritten += tensorBytes(instance.result(i));
    cost.flops += flopsPerElement * elementCount(instance.resultShape(i));
  }
  return cost;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

AttrValue AttrValue::ofBool(bool value) {
  AttrValue attr;
  attr.kind = Kind::Bool;
  attr.flag = value;
  return attr;
}

AttrValue AttrValue::ofInt(int64_t value) {
  AttrValue attr;
  attr.kind = Kind::Int;
  attr.integer = value;
  return attr;
}

AttrValue AttrValue::ofReal(double value) {
  AttrValue attr;
  attr.kind = Kind::Real;
  attr.real = value;
  return attr;
}

AttrValue AttrValue::ofInts(std::vector<int64_t> values) {
  AttrValue attr;
  attr.kind = Kind::Ints;
  attr.ints = std::move(values);
  return attr;
}

AttrValue AttrValue::ofReals(std::vector<double> values) {
  AttrValue attr;
  attr.kind = Kind::Reals;
  attr.reals = std::move(values);
  return attr;
}

AttrValue AttrValue::ofString(std::string value) {
  AttrValue attr;
  attr.kind = Kind::String;
  attr.text = std::move(value);
  return attr;
}

AttrValue AttrValue::ofStrings(std::vector<std::string> values) {
  AttrValue attr;
  attr.kind = Kind::Strings;
  attr.texts = std::move(values);
  return attr;
}

bool AttrValue::hasKind(Kind expected) const {
  if (kind == expected)
    return true;
  if (expected == Kind::Real && kind == Kind::Int)
    return true;
  // An empty array reads as either kind of array.
  bool emptyArray = (kind == Kind::Ints && ints.empty()) ||
                    (kind == Kind::Reals && reals.empty()) ||
                    (kind == Kind::Strings && texts.empty());
  if (emptyArray && (expected == Kind::Ints || expected == Kind::Reals ||
                     expected == Kind::Strings))
    return true;
  return expected == Kind::Reals && kind == Kind::Ints;
}

const char *attrKindName(AttrKind kind) {
  switch (kind) {
  case AttrKind::Bool:
    return "a bool";
  case AttrKind::Int:
    return "an integer";
  case AttrKind::Real:
    return "a real";
  case AttrKind::Ints:
    return "an array of integers";
  case AttrKind::Reals:
    return "an array of reals";
  case AttrKind::String:
    return "a string";
  case AttrKind::Strings:
    return "an array of strings";
  }
  return "?";
}

bool OpInstance::flag(const std::string &name) const {
  auto it = attrs_.find(name);
  return it != attrs_.end() && it->second.flag;
}
int64_t OpInstance::integer(const std::string &name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? 0 : it->second.integer;
}
double OpInstance::real(const std::string &name) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end())
    return 0;
  return it->second.kind == AttrKind::Int
             ? static_cast<double>(it->second.integer)
             : it->second.real;
}
std::vector<int64_t> OpInstance::ints(const std::string &name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? std::vector<int64_t>{} : it->second.ints;
}
std::vector<double> OpInstance::reals(const std::string &name) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end())
    return {};
  if (it->second.kind == AttrKind::Ints)
    return std::vector<double>(it->second.ints.begin(), it->second.ints.end());
  return it->second.reals;
}
std::string OpInstance::text(const std::string &name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? std::string() : it->second.text;
}

std::vector<std::string> OpInstance::texts(const std::string &name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? std::vector<std::string>() : it->second.texts;
}

std::optional<std::vector<int64_t>>
broadcastShapes(const std::vector<int64_t> &lhs,
                const std::vector<int64_t> &rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  std::vector<int64_t> shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l != r && l != 1 && r != 1)
      return std::nullopt;
    shape[i] = l == 1 ? r : l;
  }
  return shape;
}

bool isUnaryFunction(const std::string &name) {
  UnaryFunction function;
  return findUnaryFunction(name.c_str(), function);
}

bool acceptsElementType(OperandKind kind, ElementType type) {
  switch (kind) {
  case OperandKind::Float:
    return type == ElementType::F32 || type == ElementType::BF16 ||
           type == ElementType::F16;
  case OperandKind::Float32:
    return type == ElementType::F32;
  case OperandKind::Index:
    return type == ElementType::I32;
  case OperandKind::Any:
    return true;
  }
  return false;
}

const std::vector<OpContract> &opContracts() {
  static const std::vector<OpContract> table = buildOpContracts();
  return table;
}

const OpContract &opContract(OpId id) { return opContracts()[id]; }

const OpContract *findOpContract(const std::string &name) {
  static const std::unordered_map<std::string, OpId> ids = [] {
    std::unordered_map<std::string, OpId> byName;
    for (const OpContract &contract : opContracts())
      byName.emplace(contract.name, contract.id);
    return byName;
  }();
  auto it = ids.find(name);
  return it == ids.end() ? nullptr : &opContracts()[it->second];
}

bool OpContract::acceptsOperandCount(size_t count) const {
  if (variadic)
    return count >= 1;
  size_t required = 0;
  while (required < operands.size() && !operands[required].optional)
    ++required;
  return count >= required && count <= operands.size();
}

std::string OpContract::operandCountText() const {
  if (variadic)
    return "at least 1";
  size_t required = 0;
  while (required < operands.size() && !operands[required].optional)
    ++required;
  std::string text = std::to_string(required);
  for (size_t count = required + 1; count <= operands.size(); ++count)
    text += (count == operands.size() ? " or " : ", ") + std::to_string(count);
  return text;
}

OpParameters decodeParameters(const OpContract &contract,
                              const AttrMap &attrs) {
  if (!contract.parameters)
    return std::monostate();
  static const std::vector<TensorType> noOperands;
  return contract.parameters(OpInstance(noOperands, attrs));
}

Diagnostic inferResults(const OpContract &contract, const OpInstance &instance,
                        std::vector<TensorType> &results) {
  size_t found = instance.numInputs();
  if (!contract.acceptsOperandCount(found))
    return "expected " + contract.operandCountText() + " operands, found " +
           std::to_string(found);
  std::optional<size_t> firstFloat;
  for (size_t i = 0; i < found; ++i) {
    const OperandSpec &spec = contract.operands[contract.variadic ? 0 : i];
    ElementType type = instance.input(i).element;
    std::string name =
        spec.name +
        (contract.variadic ? " " + std::to_string(i) : std::string());
    if (!acceptsElementType(spec.kind, type)) {
      const char *accepted = spec.kind == OperandKind::Index ? "i32"
                             : spec.kind == OperandKind::Float32
                                 ? "f32"
                                 : "f32, bf16 or f16";
      return "expected " + name + " of element type " + accepted +
             ", found " + elementTypeName(type);
    }
    // Float operands share the first one's element type.
    if (spec.kind == OperandKind::Float) {
      if (!firstFloat) {
        firstFloat = i;
      } else if (instance.input(*firstFloat).element != type) {
        const OperandSpec &first =
            contract.operands[contract.variadic ? 0 : *firstFloat];
        return "expected " + name + " of element type " +
               elementTypeName(instance.input(*firstFloat).element) +
               " (that of " + first.name + "), found " +
               elementTypeName(type);
      }
    }
  }
  for (const AttrSpec &spec : contract.attrs) {
    const AttrValue *value = instance.find(spec.name);
    if (!value) {
      if (spec.required)
        return "missing attribute '" + spec.name + "'";
      continue;
    }
    if (!value->hasKind(spec.kind))
      return "attribute '" + spec.name + "' has the wrong kind: expected " +
             attrKindName(spec.kind);
  }
  results.clear();
  return contract.rule(instance, results);
}

} // namespace trellis
