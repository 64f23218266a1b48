//===- OpTable.h - Writing rows of the plan op table ------------*- C++ -*-===//
//
// What the row files (lib/ops/*.cpp) share: the table builder, which gives
// each row its id in the order rows are added, and the checks their shape
// rules state expected and found values with. Each row file adds one
// family of ops with every fact of each op: operands, attributes, shape
// rule, factor sharding rule, cost, precision policy and effects.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_LIB_OPTABLE_H
#define TRELLIS_COMMON_LIB_OPTABLE_H

#include "trellis/Common/OpContract.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace trellis {

/// Every plan op's contract, in id order (OpTable.cpp).
std::vector<OpContract> buildOpContracts();

namespace optable {

using Shape = std::vector<int64_t>;
using Results = std::vector<TensorType>;
using ShapeRule =
    std::function<Diagnostic(const OpInstance &, std::vector<TensorType> &)>;
using FactorRule = std::function<ShardingRule(const OpInstance &)>;
using CostRule = std::function<OpCost(const OpInstance &)>;
using ParameterDecoder = OpParameters (*)(const OpInstance &);

/// Returns the diagnostic of `expr` if it has one.
#define TRELLIS_CHECK(expr)                                                    \
  do {                                                                         \
    if (::trellis::Diagnostic diagnostic = (expr))                             \
      return diagnostic;                                                       \
  } while (false)

/// One row being written: `table.add(...).factors(...).cost(...)`.
class Row {
public:
  explicit Row(OpContract &contract) : contract_(contract) {}
  Row &factors(FactorRule rule);
  /// `flopsPerElement` per result element, every tensor moved once.
  Row &flopsPerElement(double flops);
  Row &cost(CostRule rule);
  Row &precision(PrecisionPolicy policy);
  Row &variadic();
  Row &effects(OpEffects effects);
  /// The row's member of its family's enum (OpContract::member).
  Row &member(int member);
  template <typename Member> Row &member(Member value) {
    return member(static_cast<int>(value));
  }
  Row &computeClass(ComputeClass computeClass);
  /// fused_elementwise programs may take the op.
  Row &fusible();
  /// The op computes another op's gradient (OpContract::gradient).
  Row &gradient();
  /// The row's last `count` results exist only where the instance's
  /// operands ask for them (OpContract::optionalResults).
  Row &optionalResults(size_t count);
  OpContract &contract() { return contract_; }

private:
  OpContract &contract_;
};

class TableBuilder {
public:
  /// The family of the rows added next (every row file opens each of its
  /// families with it), and how they decode their parameters
  /// (OpContract::parameters; null: they read none).
  void family(OpFamily family, ParameterDecoder parameters = nullptr) {
    family_ = family;
    parameters_ = parameters;
  }
  /// Adds a compute op of the current family; its cost defaults to one
  /// flop per result element, its compute class to the family's (matmul:
  /// gemm, attention: attention, else memory-bound).
  Row add(const std::string &name, std::vector<OperandSpec> operands,
          size_t results, std::vector<AttrSpec> attrs, ShapeRule rule);
  /// Adds a collective or transfer over the mesh axes in `axes` (a
  /// required attribute put first); it has no sharding rule and moves
  /// bytes only. Its family (collective, or point-to-point for send and
  /// recv) and member come from its name's CollectiveKind.
  Row addCollective(const std::string &name, std::vector<OperandSpec> operands,
                    size_t results, std::vector<AttrSpec> attrs,
                    ShapeRule rule);

  std::vector<OpContract> take();

private:
  /// Stable addresses while rows are written.
  std::vector<std::unique_ptr<OpContract>> rows_;
  OpFamily family_ = OpFamily::Fill;
  ParameterDecoder parameters_ = nullptr;
};

/// The families, one file each.
void addPointwiseOps(TableBuilder &table);
void addShapeOps(TableBuilder &table);
void addLayerOps(TableBuilder &table);
void addAttentionOps(TableBuilder &table);
void addExpertOps(TableBuilder &table);
void addOptimizerOps(TableBuilder &table);
void addCollectiveOps(TableBuilder &table);

// Operand and attribute specs several families use.
extern const OperandSpec kInput;
/// Ops that only move elements take any dtype (token ids too).
extern const OperandSpec kAnyInput;
extern const AttrSpec kOptionalAxes;
/// The sequence in zigzag order of this many chunks (SequenceChunks.h).
extern const AttrSpec kChunks;

// Checks for shape rules; each returns what was expected and found.
std::string text(int64_t value);
Diagnostic expectRank(const OpInstance &op, size_t i, const std::string &name,
                      size_t rank);
Diagnostic expectSameShape(const OpInstance &op, size_t i,
                           const std::string &name, size_t reference,
                           const std::string &referenceName);
/// Operand `i` is 1-D of the input's last dimension.
Diagnostic expectFeatureVector(const OpInstance &op, size_t i,
                               const std::string &name);
Diagnostic expectPositive(const OpInstance &op, const std::string &name);

TensorType f32(Shape shape);
/// Operand `i`'s type with another shape.
TensorType like(const OpInstance &op, size_t i, Shape shape);
Diagnostic sameAsInputRule(const OpInstance &op, Results &results);

// Factor rules several families use.
/// One parallel factor per dimension of result 0; each operand's
/// dimensions map to the result factor they broadcast into, or to none
/// where they are stretched from size 1.
ShardingRule elementwiseFactors(const OpInstance &op);
/// Every dimension parallel but the last, which stays whole; every
/// operand and result has the input's shape.
ShardingRule rowwiseFactors(const OpInstance &op);
/// Adds the factors of rows of `shape`: every dimension parallel but the
/// last, which stays whole.
std::vector<int64_t> addRowFactors(ShardingRule &rule, const Shape &shape);
/// Ops without operands (fill, positions): one parallel factor per
/// dimension of the result.
ShardingRule resultFactors(const OpInstance &op);
/// The same, never split (a constant every rank holds whole).
ShardingRule wholeResultFactors(const OpInstance &op);

} // namespace optable
} // namespace trellis

#endif // TRELLIS_COMMON_LIB_OPTABLE_H
