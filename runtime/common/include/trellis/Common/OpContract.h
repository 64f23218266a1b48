//===- OpContract.h - What every plan op means, declared once ---*- C++ -*-===//
//
// One table of plan ops shared by the compiler and the runtime: each op's
// name, operand names, attributes (kind, required or default), and shape
// rule, which computes the result types from operand types and attributes
// or says what was expected and what was found. The graph dialect's type
// inference, the plan loader's validation and the backends' kernel tables
// all read it; a new op is declared here.
//
// Plain C++17 without exceptions, so MLIR code may link it.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_OPCONTRACT_H
#define TRELLIS_COMMON_OPCONTRACT_H

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trellis {

/// Element types of plan tensors.
enum class ElementType { F32, BF16, F16, I32 };

/// "f32", "bf16", "f16", "i32".
const char *elementTypeName(ElementType type);

struct TensorType {
  std::vector<int64_t> shape;
  ElementType element = ElementType::F32;

  bool operator==(const TensorType &other) const {
    return shape == other.shape && element == other.element;
  }
  bool operator!=(const TensorType &other) const { return !(*this == other); }
};

/// `[2, 8, 64]`.
std::string formatShape(const std::vector<int64_t> &shape);

/// An attribute's value. Integers are also reals, an empty array is both
/// ints and reals (a plan file cannot tell them apart).
struct AttrValue {
  enum class Kind { Bool, Int, Real, Ints, Reals, String, Strings };
  Kind kind = Kind::Int;
  bool flag = false;
  int64_t integer = 0;
  double real = 0;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::string text;
  std::vector<std::string> texts;

  /// Whether this value can be read as `expected`.
  bool hasKind(Kind expected) const;
};
using AttrKind = AttrValue::Kind;
using AttrMap = std::map<std::string, AttrValue>;

/// "bool", "integer", ... for messages.
const char *attrKindName(AttrKind kind);

struct AttrSpec {
  std::string name;
  AttrKind kind;
  /// Absent from an instance: an error if required, else the default
  /// (false, 0, empty).
  bool required = true;
};

/// One op instance as a shape rule sees it.
class OpInstance {
public:
  OpInstance(const std::vector<TensorType> &inputs, const AttrMap &attrs,
             int64_t groupSize = 1, size_t numAxes = 0)
      : inputs_(inputs), attrs_(attrs), groupSize_(groupSize),
        numAxes_(numAxes) {}

  size_t numInputs() const { return inputs_.size(); }
  const TensorType &input(size_t i) const { return inputs_[i]; }
  const std::vector<int64_t> &shape(size_t i) const {
    return inputs_[i].shape;
  }
  /// Collectives: the ranks in the group along the op's mesh axes, and
  /// how many axes it names.
  int64_t groupSize() const { return groupSize_; }
  size_t numAxes() const { return numAxes_; }

  bool has(const std::string &name) const { return attrs_.count(name) != 0; }
  /// The attribute named `name`, or null.
  const AttrValue *find(const std::string &name) const {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? nullptr : &it->second;
  }
  /// Attribute values; absent ones read as false, 0 or empty.
  bool flag(const std::string &name) const;
  int64_t integer(const std::string &name) const;
  double real(const std::string &name) const;
  std::vector<int64_t> ints(const std::string &name) const;
  std::vector<double> reals(const std::string &name) const;
  std::string text(const std::string &name) const;
  std::vector<std::string> texts(const std::string &name) const;

private:
  const std::vector<TensorType> &inputs_;
  const AttrMap &attrs_;
  int64_t groupSize_;
  size_t numAxes_;
};

/// A failed rule's message, or nullopt.
using Diagnostic = std::optional<std::string>;

/// The element types an operand takes.
enum class OperandKind {
  /// Floating point: f32, bf16 or f16; an op's Float operands share one
  /// element type.
  Float,
  /// f32 only: master weights, optimizer states, their gradients.
  Float32,
  /// Integer ids: i32.
  Index,
  /// Any element type (layout ops that move bytes).
  Any,
};

struct OperandSpec {
  std::string name;
  OperandKind kind = OperandKind::Float;
};

struct OpContract {
  std::string name;
  /// Operands, named for messages. With `variadic`, one or more operands,
  /// all like the first.
  std::vector<OperandSpec> operands;
  bool variadic = false;
  /// Result count.
  size_t results = 1;
  std::vector<AttrSpec> attrs;
  /// Whether the op communicates over mesh axes (collectives, transfers).
  bool collective = false;
  /// Whether a compute op's kernel itself combines values over its mesh
  /// `axes` (cross-entropy over split classes): it must not run while
  /// collectives are in flight. Other ops with `axes` only read the
  /// rank's place from them.
  bool reducesOverAxes = false;
  /// Whether the one result is the one operand's bytes unchanged (reshape:
  /// the same elements in the same row-major order): the memory plan may
  /// place it in the operand's bytes, and the kernel then moves nothing.
  bool sharesOperandBytes = false;
  /// Appends the result types; or returns what was expected and found.
  /// Runs after operand count and attributes were checked.
  std::function<Diagnostic(const OpInstance &, std::vector<TensorType> &)>
      rule;
};

/// The contract of plan op `name`, or null.
const OpContract *findOpContract(const std::string &name);

/// Every plan op, by name.
const std::map<std::string, OpContract> &opContracts();

/// Whether an operand of `kind` takes `type`.
bool acceptsElementType(OperandKind kind, ElementType type);

/// Checks `instance` against `contract` (operand count and types,
/// attributes, the shape rule) and sets `results`.
Diagnostic inferResults(const OpContract &contract, const OpInstance &instance,
                        std::vector<TensorType> &results);

/// NumPy broadcast of two shapes; nullopt if they do not broadcast.
std::optional<std::vector<int64_t>>
broadcastShapes(const std::vector<int64_t> &lhs,
                const std::vector<int64_t> &rhs);

/// The pointwise functions of unary ops and `unary_grad`, by name.
bool isUnaryFunction(const std::string &name);

} // namespace trellis

#endif // TRELLIS_COMMON_OPCONTRACT_H
