//===- FusedElementwiseTest.cpp - Fused programs against their members ----===//
//
// For each fused pattern the compiler makes (bias + GELU, GELU's backward
// with a scale and a residual, SwiGLU, broadcasts from both sides, bf16
// chains with casts), fused_elementwise gives bit for bit what its member
// ops give run one by one, on tensors larger than a block (so that blocks,
// threads and tails all take part).
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include <gtest/gtest.h>

using namespace trellis;
using namespace trellis::runtime;
using namespace trellis::runtime::testing;

namespace {

/// Runs a fused program.
void runFused(DeviceTensors &b, std::vector<int64_t> inputs, int64_t output,
           std::vector<std::string> program) {
  b.run("fused_elementwise", std::move(inputs), output,
        {{"program", texts(std::move(program))}});
}

const std::vector<int64_t> kRows{3, 1000, 8}; // 24000 elements, 6 blocks

class FusedElementwiseTest : public EveryBackend {};
TRELLIS_ON_EVERY_BACKEND(FusedElementwiseTest);

TEST_P(FusedElementwiseTest, BiasGelu) {
  DeviceTensors b(2, GetParam());
  int64_t x = b.add(kRows, DType::F32, 1), bias = b.add({8}, DType::F32, 2);
  int64_t sum = b.add(kRows, DType::F32, 0), gelu = b.add(kRows, DType::F32, 0),
          fused = b.add(kRows, DType::F32, 0);
  b.run("add", {x, bias}, sum);
  b.run("gelu_tanh", {sum}, gelu);
  runFused(b, {x, bias}, fused, {"add %0 %1", "gelu_tanh %2"});
  b.expectSameBits(gelu, fused);
}

TEST_P(FusedElementwiseTest, GeluBackwardScaleResidual) {
  DeviceTensors b(2, GetParam());
  int64_t x = b.add(kRows, DType::F32, 3), dy = b.add(kRows, DType::F32, 4),
          r = b.add(kRows, DType::F32, 5);
  int64_t grad = b.add(kRows, DType::F32, 0),
          scaled = b.add(kRows, DType::F32, 0),
          sum = b.add(kRows, DType::F32, 0), fused = b.add(kRows, DType::F32, 0);
  b.run("unary_grad", {x, dy}, grad, {{"function", text("gelu_tanh")}});
  b.run("scale", {grad}, scaled, {{"factor", real(0.125)}});
  b.run("add", {scaled, r}, sum);
  runFused(b, {x, dy, r}, fused,
          {"unary_grad gelu_tanh %0 %1", "scale %3 0.125", "add %4 %2"});
  b.expectSameBits(sum, fused);
}

TEST_P(FusedElementwiseTest, SwiGluAndBroadcastsFromBothSides) {
  DeviceTensors b(2, GetParam());
  int64_t gate = b.add(kRows, DType::F32, 6), up = b.add(kRows, DType::F32, 7);
  int64_t silu = b.add(kRows, DType::F32, 0), product = b.add(kRows, DType::F32, 0),
          fused = b.add(kRows, DType::F32, 0);
  b.run("silu", {gate}, silu);
  b.run("mul", {silu, up}, product);
  runFused(b, {gate, up}, fused, {"silu %0", "mul %2 %1"});
  b.expectSameBits(product, fused);
  // [3, 1, 8] against [1000, 1]: the result [3, 1000, 8].
  int64_t left = b.add({3, 1, 8}, DType::F32, 8),
          right = b.add({1000, 1}, DType::F32, 9);
  int64_t diff = b.add(kRows, DType::F32, 0), ratio = b.add(kRows, DType::F32, 0),
          top = b.add(kRows, DType::F32, 0), fusedTop = b.add(kRows, DType::F32, 0);
  b.run("sub", {left, right}, diff);
  b.run("div", {diff, right}, ratio);
  b.run("maximum", {ratio, left}, top);
  runFused(b, {left, right}, fusedTop,
          {"sub %0 %1", "div %2 %1", "maximum %3 %0"});
  b.expectSameBits(top, fusedTop);
}

TEST_P(FusedElementwiseTest, Bf16ChainRoundsLikeItsMembers) {
  DeviceTensors b(2, GetParam());
  int64_t x = b.add(kRows, DType::BF16, 10), y = b.add(kRows, DType::BF16, 11),
          bias = b.add({8}, DType::F32, 12);
  int64_t sum = b.add(kRows, DType::BF16, 0), wide = b.add(kRows, DType::F32, 0),
          biased = b.add(kRows, DType::F32, 0),
          narrow = b.add(kRows, DType::BF16, 0),
          activated = b.add(kRows, DType::BF16, 0),
          fused = b.add(kRows, DType::BF16, 0);
  b.run("add", {x, y}, sum);
  b.run("cast", {sum}, wide, {{"to", text("f32")}});
  b.run("add", {wide, bias}, biased);
  b.run("cast", {biased}, narrow, {{"to", text("bf16")}});
  b.run("gelu_tanh", {narrow}, activated);
  runFused(b, {x, y, bias}, fused,
          {"add %0 %1", "cast f32 %3", "add %4 %2", "cast bf16 %5",
           "gelu_tanh %6"});
  b.expectSameBits(activated, fused);
}

// A program whose last value is not of the result's dtype is refused (its
// values would be stored as the wrong encoding).
TEST_P(FusedElementwiseTest, RefusesAResultOfAnotherDtype) {
  DeviceTensors b(2, GetParam());
  int64_t x = b.add(kRows, DType::BF16, 13), y = b.add(kRows, DType::BF16, 14);
  int64_t wide = b.add(kRows, DType::F32, 0);
  Status status = b.launch("fused_elementwise", {x, y}, {wide},
                           {{"program", texts({"add %0 %1"})}});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "fused_elementwise: the program computes bf16 "
                              "values but its result is f32");
}

} // namespace
