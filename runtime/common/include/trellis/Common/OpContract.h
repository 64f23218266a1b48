//===- OpContract.h - What every plan op means, declared once ---*- C++ -*-===//
//
// One table of plan ops shared by the compiler and the runtime, one row per
// op: its id, name, operand names and element types, attributes (kind,
// required or default), shape rule (result types from operand types and
// attributes, or what was expected and what was found), factor sharding
// rule, cost (FLOPs and bytes), precision policy and effects. The graph
// dialect's type inference, sharding rules, costs and precision policies,
// the plan loader's validation, the executor's and the report's memory
// reasoning and the backends' kernel registries all read it; a new op is a
// new row (lib/ops/*.cpp).
//
// Plain C++17 without exceptions, so MLIR code may link it.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_OPCONTRACT_H
#define TRELLIS_COMMON_OPCONTRACT_H

#include "trellis/Common/OpFamilies.h"
#include "trellis/Common/OpParameters.h"
#include "trellis/Common/ShardingRule.h"

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

/// Bytes per element: 4, 2, 2, 4.
int64_t elementTypeBytes(ElementType type);

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

  // Values of one kind.
  static AttrValue ofBool(bool value);
  static AttrValue ofInt(int64_t value);
  static AttrValue ofReal(double value);
  static AttrValue ofInts(std::vector<int64_t> values);
  static AttrValue ofReals(std::vector<double> values);
  static AttrValue ofString(std::string value);
  static AttrValue ofStrings(std::vector<std::string> values);
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

/// One op instance as a row's rules see it: operand types and attributes
/// (shape rules), and the result types too (sharding rules and costs).
class OpInstance {
public:
  OpInstance(const std::vector<TensorType> &inputs, const AttrMap &attrs,
             int64_t groupSize = 1, size_t numAxes = 0)
      : inputs_(inputs), attrs_(attrs), groupSize_(groupSize),
        numAxes_(numAxes) {}
  /// An instance whose result types are known.
  OpInstance(const std::vector<TensorType> &inputs, const AttrMap &attrs,
             const std::vector<TensorType> &results)
      : inputs_(inputs), attrs_(attrs), results_(&results) {}

  size_t numInputs() const { return inputs_.size(); }
  const TensorType &input(size_t i) const { return inputs_[i]; }
  const std::vector<int64_t> &shape(size_t i) const {
    return inputs_[i].shape;
  }
  /// Result types: set for sharding rules and costs, not for shape rules.
  size_t numResults() const { return results_ ? results_->size() : 0; }
  const TensorType &result(size_t i) const { return (*results_)[i]; }
  const std::vector<int64_t> &resultShape(size_t i) const {
    return (*results_)[i].shape;
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
  const std::vector<TensorType> *results_ = nullptr;
  int64_t groupSize_ = 1;
  size_t numAxes_ = 0;
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
  /// An operand an instance may leave out; only trailing operands are
  /// optional (moe_route's score bias).
  bool optional = false;
};

/// The precision an op computes in under mixed precision: the policy the
/// compiler's `-trellis-mixed-precision` pass inserts casts from.
enum class PrecisionPolicy {
  /// The compute dtype (bf16 or f16): its f32 operands are cast down when
  /// they are parameters or meet a low-precision operand. The op's kernels
  /// still accumulate in fp32 (matmul sums, norm and softmax statistics).
  Low,
  /// fp32 inside, whatever its operands' dtype: the op reads bf16 or f16
  /// operands as they are and computes in fp32 (cross-entropy: the loss is
  /// f32; the logits' gradient, computed in fp32, rounds once to the
  /// logits' dtype, the values an fp32 copy cast back would have). No
  /// casts are inserted, so no fp32 copy of a low-precision operand lives
  /// between forward and backward.
  Float32,
  /// The dtype its operands have (casts themselves).
  Operands,
};

/// What one execution of an op costs: floating-point operations (a
/// multiply-add is 2) and bytes read and written. Estimates for balancing,
/// reports and the planner, not measurements.
struct OpCost {
  double flops = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;

  OpCost &operator+=(const OpCost &other) {
    flops += other.flops;
    bytesRead += other.bytesRead;
    bytesWritten += other.bytesWritten;
    return *this;
  }
};

/// What an op does besides computing its results from its operands.
struct OpEffects {
  /// An optimizer update: for each result, the operand whose new value it
  /// is, element by element and of its shape (so it may be computed in
  /// that operand's bytes), or -1. Empty for other ops.
  std::vector<int64_t> replaces;
  /// An update's gradient operand, or -1.
  int64_t gradientOperand = -1;
  /// An update's optional gradient scale (its last operand when present),
  /// or -1: the update reads the gradient divided by it, and when it is not
  /// finite the update leaves its operands' values (a loss-scaled step that
  /// overflowed changes nothing). PyTorch's fused Adam takes the same pair
  /// (grad_scale and found_inf) as two tensors.
  int64_t gradientScaleOperand = -1;
  /// Adds a micro-batch's value into its step total, which it reads (the
  /// runtime sets `first` on each total's first accumulation of a step).
  bool accumulates = false;
  /// The one result is the one operand's bytes unchanged (reshape: the same
  /// elements in the same row-major order): the memory plan may place it
  /// in the operand's bytes, and the kernel then moves nothing.
  bool sharesOperandBytes = false;
  /// A compute op whose kernel itself combines values over its mesh `axes`
  /// (cross-entropy over split classes): it must not run while collectives
  /// are in flight. Other ops with `axes` only read the rank's place there.
  bool reducesOverAxes = false;
  /// The same for the instances whose attribute `exchangesWhen.first`
  /// reads `exchangesWhen.second` (an expert op with dispatch =
  /// "all_to_all" sends its slots' rows over its axes); empty: none.
  std::pair<std::string, std::string> exchangesWhen;
};

/// A plan op's index in the table, dense from 0 in the table's order:
/// backends index their kernels by it. Not stored in plans (they name ops).
using OpId = uint32_t;

struct OpContract {
  OpId id = 0;
  std::string name;
  /// Operands, named for messages. With `variadic`, one or more operands,
  /// all like the first.
  std::vector<OperandSpec> operands;
  bool variadic = false;
  /// Result count: the most an instance has; the last `optionalResults`
  /// of them only where its operands ask for them (attention_grad's sinks
  /// gradient).
  size_t results = 1;
  size_t optionalResults = 0;
  std::vector<AttrSpec> attrs;
  /// Whether the op communicates over mesh axes (collectives, transfers).
  /// Such ops have no sharding rule: the partitioner makes them.
  bool collective = false;
  /// The row's family, and its member where the family enumerates its
  /// members (FamilyOfMember names each family's enum; collective and
  /// point-to-point: CollectiveKind): the enumerator's value, else -1.
  OpFamily family = OpFamily::Fill;
  int member = -1;
  /// How the planner's time model prices an instance.
  ComputeClass computeClass = ComputeClass::MemoryBound;
  /// Whether an instance may be a member of a fused_elementwise program
  /// (FusedProgram.h's instructions are these rows).
  bool fusible = false;
  /// Whether the op computes the gradient of another op of its family
  /// (layer_norm_grad), whose member it shares: passes that rewrite a
  /// family's forward ops (sequence parallelism's norms) leave these to the
  /// gradients' own rules, and kernels tell the two apart by it.
  bool gradient = false;
  PrecisionPolicy precision = PrecisionPolicy::Low;
  OpEffects effects;
  /// Appends the result types; or returns what was expected and found.
  /// Runs after operand count and attributes were checked.
  std::function<Diagnostic(const OpInstance &, std::vector<TensorType> &)>
      rule;
  /// The factor sharding rule of an instance with its result types (null
  /// for collectives).
  std::function<ShardingRule(const OpInstance &)> factors;
  /// The cost of one execution of an instance with its result types.
  std::function<OpCost(const OpInstance &)> cost;
  /// Reads a valid instance's attributes into its family's parameters
  /// (OpParameters.h): what kernels read. Null for the families that read
  /// none (their parameters are std::monostate).
  OpParameters (*parameters)(const OpInstance &) = nullptr;

  bool isUpdate() const { return !effects.replaces.empty(); }
  /// The row's member of the family `Member` enumerates
  /// (FamilyOfMember); nullopt for a row of another family.
  template <typename Member> std::optional<Member> memberAs() const {
    if (family != FamilyOfMember<Member>::value)
      return std::nullopt;
    return static_cast<Member>(member);
  }
  std::optional<UnaryFunction> unaryFunction() const {
    return memberAs<UnaryFunction>();
  }
  std::optional<BinaryFunction> binaryFunction() const {
    return memberAs<BinaryFunction>();
  }
  std::optional<CollectiveKind> collectiveKind() const {
    if (family != OpFamily::Collective && family != OpFamily::PointToPoint)
      return std::nullopt;
    return static_cast<CollectiveKind>(member);
  }
  /// Whether an instance with `count` operands has its update's gradient
  /// scale (OpEffects::gradientScaleOperand).
  bool hasGradientScale(size_t count) const {
    return effects.gradientScaleOperand >= 0 &&
           count > static_cast<size_t>(effects.gradientScaleOperand);
  }
  /// Whether an instance may have `count` operands (the optional trailing
  /// ones left out, or a variadic op's one or more).
  bool acceptsOperandCount(size_t count) const;
  bool acceptsResultCount(size_t count) const {
    return count + optionalResults >= results && count <= results;
  }
  /// Whether an instance may have `count` results, and the counts in words
  /// ("3", "3 to 4").
  std::string resultCountText() const {
    return optionalResults == 0 ? std::to_string(results)
                                : std::to_string(results - optionalResults) +
                                      " to " + std::to_string(results);
  }
  /// The operand counts an instance may have, for messages ("2", "1 or 2",
  /// "at least 1").
  std::string operandCountText() const;
  /// The operand an update's result `result` replaces, or -1.
  int64_t replacedOperand(size_t result) const {
    return result < effects.replaces.size() ? effects.replaces[result] : -1;
  }
};

/// Whether an instance of `contract` (null: an op outside the table) with
/// `axes` (`overAxes`) communicates inside its kernel, so that it must not
/// run while collectives are in flight: `attribute(name)` gives the text
/// of the instance's attribute `name` ("" when absent).
bool kernelCommunicates(
    const OpContract *contract, bool overAxes,
    const std::function<std::string(const std::string &)> &attribute);

/// The contract of plan op `name`, or null.
const OpContract *findOpContract(const std::string &name);

/// Every plan op, in id order.
const std::vector<OpContract> &opContracts();

/// The contract of the op with `id` (< opContracts().size()).
const OpContract &opContract(OpId id);

/// Whether an operand of `kind` takes `type`.
bool acceptsElementType(OperandKind kind, ElementType type);

/// Checks `instance` against `contract` (operand count and types,
/// attributes, the shape rule) and sets `results`.
Diagnostic inferResults(const OpContract &contract, const OpInstance &instance,
                        std::vector<TensorType> &results);

/// The parameters of an instance of `contract` with attributes `attrs`,
/// which `contract` validated (inferResults).
OpParameters decodeParameters(const OpContract &contract, const AttrMap &attrs);

/// Bytes of a tensor of `type`.
int64_t tensorBytes(const TensorType &type);

/// Elements of a tensor of `shape`.
int64_t elementCount(const std::vector<int64_t> &shape);

/// `flopsPerElement` per result element; every operand read once, every
/// result written once. The default cost of a row.
OpCost elementwiseCost(const OpInstance &instance, double flopsPerElement);

/// NumPy broadcast of two shapes; nullopt if they do not broadcast.
std::optional<std::vector<int64_t>>
broadcastShapes(const std::vector<int64_t> &lhs,
                const std::vector<int64_t> &rhs);

/// Whether `name` is one of the unary family's functions
/// (TRELLIS_UNARY_FUNCTIONS): the unary ops and `unary_grad`'s function.
bool isUnaryFunction(const std::string &name);

} // namespace trellis

#endif // TRELLIS_COMMON_OPCONTRACT_H
