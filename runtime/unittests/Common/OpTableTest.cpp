//===- OpTableTest.cpp - Rows of the plan op table, without MLIR ----------===//
//
// Sharding rules, costs and effects evaluated on instances, as Shardy's
// op_sharding_rule_registry tests print the rules of its ops.
//
//===----------------------------------------------------------------------===//

#include "trellis/Common/OpContract.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace {

TensorType f32(std::vector<int64_t> shape) {
  return {std::move(shape), ElementType::F32};
}

/// An instance of `op` on `inputs` with `attrs`, its results inferred.
class Instance {
public:
  Instance(const std::string &op, std::vector<TensorType> inputs,
           AttrMap attrs = {})
      : contract_(findOpContract(op)), inputs_(std::move(inputs)),
        attrs_(std::move(attrs)) {
    EXPECT_NE(contract_, nullptr) << op;
    Diagnostic failure =
        inferResults(*contract_, OpInstance(inputs_, attrs_), results_);
    EXPECT_FALSE(failure) << *failure;
  }

  std::string rule() const {
    return contract_->factors(OpInstance(inputs_, attrs_, results_))
        .toString(/*withFlags=*/true);
  }
  OpCost cost() const {
    return contract_->cost(OpInstance(inputs_, attrs_, results_));
  }

private:
  const OpContract *contract_;
  std::vector<TensorType> inputs_, results_;
  AttrMap attrs_;
};

AttrValue flag(bool value) { return AttrValue::ofBool(value); }
AttrValue ints(std::vector<int64_t> values) {
  return AttrValue::ofInts(std::move(values));
}
AttrValue real(double value) { return AttrValue::ofReal(value); }

TEST(OpTableTest, MatmulSplitsRowsAndColumnsAndReducesTheContraction) {
  Instance plain("matmul", {f32({8, 16}), f32({16, 32})});
  EXPECT_EQ(plain.rule(), "([f0, f2], [f2, f1]) -> ([f0, f1]) "
                          "{f0=8 parallel, f1=32 parallel, f2=16 reduction}");
  Instance transposed(
      "matmul", {f32({16, 8}), f32({32, 16})},
      {{"transpose_lhs", flag(true)}, {"transpose_rhs", flag(true)}});
  EXPECT_EQ(transposed.rule(),
            "([f2, f0], [f1, f2]) -> ([f0, f1]) "
            "{f0=8 parallel, f1=32 parallel, f2=16 reduction}");
}

TEST(OpTableTest, BroadcastOperandsMapStretchedDimensionsToNoFactor) {
  Instance add("add", {f32({8, 32}), f32({1, 32})});
  EXPECT_EQ(add.rule(), "([f0, f1], [_, f1]) -> ([f0, f1]) "
                        "{f0=8 parallel, f1=32 parallel} linear");
  Instance mul("mul", {f32({8, 32}), f32({32})});
  EXPECT_EQ(mul.rule(), "([f0, f1], [f1]) -> ([f0, f1]) "
                        "{f0=8 parallel, f1=32 parallel}");
}

TEST(OpTableTest, ReductionsDifferInWhatASplitReducedDimensionLeaves) {
  AttrMap attrs = {{"dims", ints({1})}};
  EXPECT_EQ(Instance("reduce_sum", {f32({4, 6})}, attrs).rule(),
            "([f0, f1]) -> ([f0]) {f0=4 parallel, f1=6 reduction} linear");
  EXPECT_EQ(Instance("reduce_max", {f32({4, 6})}, attrs).rule(),
            "([f0, f1]) -> ([f0]) {f0=4 parallel, f1=6 reduction} "
            "partial-max");
  attrs["keep_dims"] = flag(true);
  EXPECT_EQ(Instance("reduce_mean", {f32({4, 6})}, attrs).rule(),
            "([f0, f1]) -> ([f0, _]) {f0=4 parallel, f1=6 whole}");
}

TEST(OpTableTest, ReshapeSharesTheMajorFactorOfMergedDimensions) {
  EXPECT_EQ(
      Instance("reshape", {f32({2, 8, 4, 16})}, {{"shape", ints({2, 8, 64})}})
          .rule(),
      "([f0, f1, f2, f3]) -> ([f0, f1, f2]) {f0=2 parallel, "
      "f1=8 parallel, f2=4 parallel, f3=16 whole} linear");
}

TEST(OpTableTest, NormGradientsLeaveTheirVectorResultsPartialOverRows) {
  AttrMap attrs = {{"epsilon", real(1e-5)}};
  EXPECT_EQ(Instance("layer_norm_grad", {f32({4, 64}), f32({64}), f32({4, 64})},
                     attrs)
                .rule(),
            "([f0, f1], [f1], [f0, f1]) -> ([f0, f1], [f1], [f1]) "
            "{f0=4 parallel, f1=64 whole}");
  EXPECT_EQ(Instance("rms_norm", {f32({4, 64}), f32({64})}, attrs).rule(),
            "([f0, f1], [f1]) -> ([f0, f1]) {f0=4 parallel, f1=64 whole}");
}

TEST(OpTableTest, GroupedQueryAttentionSharesTheKvHeadFactor) {
  Instance attention(
      "attention", {f32({2, 8, 4, 16}), f32({2, 8, 2, 16}), f32({2, 8, 2, 16})},
      {{"scale", real(0.25)}});
  EXPECT_EQ(attention.rule(),
            "([f0, f1, f3, f4], [f0, f2, f3, f4], [f0, f2, f3, f4]) -> "
            "([f0, f1, f3, f4]) {f0=2 parallel, f1=8 parallel, f2=8 whole, "
            "f3=2 parallel, f4=16 whole}");
  // 4 B Hq Sq Sk D flops.
  EXPECT_EQ(attention.cost().flops, 4.0 * 2 * 4 * 8 * 8 * 16);
}

TEST(OpTableTest, UpdatesAreElementwiseAndPaddable) {
  Instance sgd("sgd", {f32({64}), f32({64})},
               {{"learning_rate", real(0.1)}, {"weight_decay", real(0)}});
  EXPECT_EQ(sgd.rule(), "([f0], [f0]) -> ([f0]) {f0=64 parallel} paddable");
  EXPECT_EQ(sgd.cost().flops, 3.0 * 64);
}

TEST(OpTableTest, CostsCountMultiplyAddsAsTwoAndMoveEveryTensorOnce) {
  OpCost matmul = Instance("matmul", {f32({8, 16}), f32({16, 32})}).cost();
  EXPECT_EQ(matmul.flops, 2.0 * 8 * 32 * 16);
  EXPECT_EQ(matmul.bytesRead, (8 * 16 + 16 * 32) * 4);
  EXPECT_EQ(matmul.bytesWritten, 8 * 32 * 4);
  OpCost transpose = Instance("transpose", {{{8, 16}, ElementType::BF16}},
                              {{"permutation", ints({1, 0})}})
                         .cost();
  EXPECT_EQ(transpose.flops, 0);
  EXPECT_EQ(transpose.bytesRead, 8 * 16 * 2);
}

TEST(OpTableTest, EffectsNameWhatUpdatesReplace) {
  const OpContract *adamw = findOpContract("adamw");
  ASSERT_NE(adamw, nullptr);
  EXPECT_TRUE(adamw->isUpdate());
  EXPECT_EQ(adamw->replacedOperand(0), 0);
  EXPECT_EQ(adamw->replacedOperand(1), 2);
  EXPECT_EQ(adamw->replacedOperand(2), 3);
  EXPECT_EQ(adamw->effects.gradientOperand, 1);
  EXPECT_EQ(adamw->effects.gradientScaleOperand, 5);
  EXPECT_FALSE(findOpContract("matmul")->isUpdate());
  EXPECT_TRUE(findOpContract("accumulate")->effects.accumulates);
  EXPECT_TRUE(findOpContract("reshape")->effects.sharesOperandBytes);
  EXPECT_TRUE(findOpContract("cross_entropy")->effects.reducesOverAxes);
  EXPECT_EQ(findOpContract("cross_entropy")->precision,
            PrecisionPolicy::Float32);
  EXPECT_EQ(findOpContract("cast")->precision, PrecisionPolicy::Operands);
}

TEST(OpTableTest, AnUpdatesGradientScaleIsAScalarWithoutFactors) {
  AttrMap attrs = {{"learning_rate", real(0.1)}, {"weight_decay", real(0)}};
  EXPECT_EQ(Instance("sgd", {f32({8, 4}), f32({8, 4}), f32({})}, attrs).rule(),
            "([f0, f1], [f0, f1], []) -> ([f0, f1]) "
            "{f0=8 parallel, f1=4 parallel} paddable");
  std::vector<TensorType> results;
  std::vector<TensorType> inputs = {f32({8}), f32({8}), f32({8})};
  Diagnostic failure =
      inferResults(*findOpContract("sgd"), OpInstance(inputs, attrs), results);
  ASSERT_TRUE(failure);
  EXPECT_EQ(*failure, "expected a scalar grad_scale, found [8]");
  EXPECT_EQ(findOpContract("sgd")->effects.gradientScaleOperand, 2);
  EXPECT_TRUE(findOpContract("sgd")->hasGradientScale(3));
  EXPECT_FALSE(findOpContract("sgd")->hasGradientScale(2));
}

} // namespace
