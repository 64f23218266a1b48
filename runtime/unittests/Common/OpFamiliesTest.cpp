//===- OpFamiliesTest.cpp - The op table's families as typed data ---------===//
//
// Each family's rows are its enum's members, one row per member with the
// member's name; the facts passes read (fusible, gradient, compute class)
// follow from the family; fused programs take exactly the fusible rows.
//
//===----------------------------------------------------------------------===//

#include "trellis/Common/FusedProgram.h"
#include "trellis/Common/OpContract.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

using namespace trellis;

namespace {

std::vector<const OpContract *> rowsOf(OpFamily family) {
  std::vector<const OpContract *> rows;
  for (const OpContract &contract : opContracts())
    if (contract.family == family)
      rows.push_back(&contract);
  return rows;
}

// Tests that the unary rows are TRELLIS_UNARY_FUNCTIONS in order, each
// row's member its function, named as the function.
TEST(OpFamiliesTest, UnaryRowsAreTheUnaryFunctions) {
  std::vector<const OpContract *> rows = rowsOf(OpFamily::Unary);
  ASSERT_EQ(rows.size(), std::size(kUnaryFunctions));
  for (size_t i = 0; i < rows.size(); ++i) {
    UnaryFunction function = kUnaryFunctions[i];
    EXPECT_EQ(rows[i]->name, unaryFunctionName(function));
    EXPECT_EQ(rows[i]->unaryFunction(), function);
    EXPECT_TRUE(rows[i]->fusible) << rows[i]->name;
    EXPECT_TRUE(isUnaryFunction(rows[i]->name));
    UnaryFunction parsed;
    ASSERT_TRUE(findUnaryFunction(rows[i]->name.c_str(), parsed));
    EXPECT_EQ(parsed, function);
  }
  EXPECT_FALSE(isUnaryFunction("softmax"));
  EXPECT_FALSE(isUnaryFunction("gelu_"));
  EXPECT_FALSE(isUnaryFunction(""));
}

// Tests that the binary rows are TRELLIS_BINARY_FUNCTIONS in order, with
// their linearity as the factor rule's flag and their fusibility.
TEST(OpFamiliesTest, BinaryRowsAreTheBinaryFunctions) {
  std::vector<const OpContract *> rows = rowsOf(OpFamily::Binary);
  ASSERT_EQ(rows.size(), std::size(kBinaryFunctions));
  std::vector<TensorType> inputs = {{{4, 8}, ElementType::F32},
                                    {{4, 8}, ElementType::F32}};
  std::vector<TensorType> results = {{{4, 8}, ElementType::F32}};
  for (size_t i = 0; i < rows.size(); ++i) {
    BinaryFunction function = kBinaryFunctions[i];
    EXPECT_EQ(rows[i]->name, binaryFunctionName(function));
    EXPECT_EQ(rows[i]->binaryFunction(), function);
    EXPECT_EQ(rows[i]->fusible, isFusibleBinary(function)) << rows[i]->name;
    AttrMap attrs;
    EXPECT_EQ(rows[i]->factors(OpInstance(inputs, attrs, results)).linear,
              isLinearBinary(function))
        << rows[i]->name;
  }
}

// Tests the shared formulas of the binary family on values where the
// functions differ.
TEST(OpFamiliesTest, BinaryFormulas) {
  EXPECT_EQ(applyBinary(BinaryFunction::Add, 3, 2), 5);
  EXPECT_EQ(applyBinary(BinaryFunction::Sub, 3, 2), 1);
  EXPECT_EQ(applyBinary(BinaryFunction::Mul, 3, 2), 6);
  EXPECT_EQ(applyBinary(BinaryFunction::Div, 3, 2), 1.5f);
  EXPECT_EQ(applyBinary(BinaryFunction::Maximum, 3, 2), 3);
  EXPECT_EQ(applyBinary(BinaryFunction::Maximum, -3, 2), 2);
  EXPECT_EQ(applyBinary(BinaryFunction::EqualMask, 3, 2), 0);
  EXPECT_EQ(applyBinary(BinaryFunction::EqualMask, 2, 2), 1);
}

// Tests that every collective and transfer row names its kind, and each
// kind is one row: point-to-point for send and recv, collective otherwise.
TEST(OpFamiliesTest, CollectiveRowsNameTheirKind) {
  std::set<CollectiveKind> kinds;
  for (const OpContract &contract : opContracts()) {
    std::optional<CollectiveKind> kind = contract.collectiveKind();
    EXPECT_EQ(kind.has_value(), contract.collective) << contract.name;
    if (!kind)
      continue;
    EXPECT_EQ(contract.name, collectiveKindName(*kind));
    EXPECT_EQ(contract.family, isPointToPoint(*kind) ? OpFamily::PointToPoint
                                                     : OpFamily::Collective);
    EXPECT_EQ(contract.computeClass, ComputeClass::Communication);
    EXPECT_TRUE(kinds.insert(*kind).second) << contract.name;
  }
  EXPECT_EQ(kinds.size(), 9u);
  CollectiveKind kind;
  EXPECT_TRUE(findCollectiveKind("reduce_scatter", kind));
  EXPECT_EQ(kind, CollectiveKind::ReduceScatter);
  EXPECT_FALSE(findCollectiveKind("expert_all_to_all", kind));
}

// Tests that a fused program takes each fusible row as an instruction and
// refuses the rest, so the fusion pass (which asks the row) and the
// programs (which parse) agree.
TEST(OpFamiliesTest, FusedProgramsTakeExactlyTheFusibleRows) {
  std::vector<ElementType> inputs = {ElementType::F32, ElementType::F32};
  for (const OpContract &contract : opContracts()) {
    std::string instruction;
    switch (contract.family) {
    case OpFamily::Binary:
      instruction = contract.name + " %0 %1";
      break;
    case OpFamily::Unary:
      instruction = contract.name + " %0";
      break;
    case OpFamily::UnaryGrad:
      instruction = "unary_grad silu %0 %1";
      break;
    case OpFamily::Scale:
      instruction = "scale %0 0.5";
      break;
    case OpFamily::Cast:
      instruction = "cast bf16 %0";
      break;
    default:
      instruction = contract.name + " %0";
    }
    FusedProgram program;
    Diagnostic failure = parseFusedProgram({instruction}, inputs, program);
    EXPECT_EQ(!failure, contract.fusible)
        << contract.name << ": " << failure.value_or("parsed");
  }
}

// Tests the families' facts that the planner and sequence parallelism read.
TEST(OpFamiliesTest, ComputeClassesAndGradients) {
  EXPECT_EQ(findOpContract("matmul")->computeClass, ComputeClass::Gemm);
  EXPECT_EQ(findOpContract("matmul_accumulate")->computeClass,
            ComputeClass::Gemm);
  EXPECT_EQ(findOpContract("expert_matmul")->computeClass, ComputeClass::Gemm);
  for (const char *attention :
       {"attention", "attention_grad", "attention_block", "attention_merge",
        "attention_block_grad"})
    EXPECT_EQ(findOpContract(attention)->computeClass,
              ComputeClass::Attention)
        << attention;
  EXPECT_EQ(findOpContract("rms_norm")->computeClass,
            ComputeClass::MemoryBound);
  std::set<std::string> norms;
  for (const OpContract *row : rowsOf(OpFamily::Norm))
    if (!row->gradient)
      norms.insert(row->name);
  EXPECT_EQ(norms, (std::set<std::string>{"layer_norm", "rms_norm"}));
  for (const OpContract &contract : opContracts()) {
    bool namedGradient = contract.name.size() > 5 &&
                         contract.name.compare(contract.name.size() - 5, 5,
                                               "_grad") == 0;
    EXPECT_EQ(contract.gradient, namedGradient) << contract.name;
  }
}

// Tests that the families with members give each row one, and that a
// member with the gradient fact names one row: kernels tell rows apart by
// these alone.
TEST(OpFamiliesTest, AMemberAndTheGradientFactNameOneRow) {
  std::set<OpFamily> enumerated = {
      OpFamily::Unary,     OpFamily::Binary,    OpFamily::Layout,
      OpFamily::Reduction, OpFamily::Norm,      OpFamily::Position,
      OpFamily::Attention, OpFamily::Expert,    OpFamily::Optimizer,
      OpFamily::Collective, OpFamily::PointToPoint};
  std::set<std::tuple<OpFamily, int, bool>> seen;
  for (const OpContract &contract : opContracts()) {
    bool hasMembers = enumerated.count(contract.family) != 0;
    EXPECT_EQ(contract.member >= 0, hasMembers) << contract.name;
    if (hasMembers) {
      EXPECT_TRUE(
          seen.insert({contract.family, contract.member, contract.gradient})
              .second)
          << contract.name << " shares its member with another row";
    }
  }
  EXPECT_EQ(findOpContract("rms_norm_grad")->memberAs<NormKind>(),
            NormKind::Rms);
  EXPECT_EQ(findOpContract("layer_norm")->memberAs<NormKind>(),
            NormKind::Layer);
  EXPECT_EQ(findOpContract("moe_route_grad")->memberAs<ExpertKind>(),
            ExpertKind::Route);
  EXPECT_EQ(findOpContract("expert_matmul_weight_grad")->memberAs<ExpertKind>(),
            ExpertKind::Matmul);
  EXPECT_EQ(findOpContract("attention_block_grad")->memberAs<AttentionPiece>(),
            AttentionPiece::Block);
  EXPECT_EQ(findOpContract("concat")->memberAs<LayoutKind>(),
            LayoutKind::Concat);
  EXPECT_EQ(findOpContract("reduce_mean")->memberAs<ReductionFunction>(),
            ReductionFunction::Mean);
  EXPECT_EQ(findOpContract("sgd")->memberAs<OptimizerKind>(),
            OptimizerKind::Sgd);
  EXPECT_EQ(findOpContract("positions")->memberAs<PositionKind>(),
            PositionKind::Positions);
  // A row of another family has no member of this one.
  EXPECT_EQ(findOpContract("softmax")->memberAs<NormKind>(), std::nullopt);
}

// Tests that every family has a name and at least one row.
TEST(OpFamiliesTest, EveryFamilyHasRowsAndAName) {
#define TRELLIS_FAMILY_CHECK(NAME, TEXT)                                       \
  EXPECT_FALSE(rowsOf(OpFamily::NAME).empty()) << TEXT;                        \
  EXPECT_STREQ(opFamilyName(OpFamily::NAME), TEXT);
  TRELLIS_OP_FAMILIES(TRELLIS_FAMILY_CHECK)
#undef TRELLIS_FAMILY_CHECK
}

} // namespace
