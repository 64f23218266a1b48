//===- FusedElementwiseTest.cpp - Fused programs against their members ----===//
//
// For each fused pattern the compiler makes (bias + GELU, GELU's backward
// with a scale and a residual, SwiGLU, broadcasts from both sides, bf16
// chains with casts), fused_elementwise gives bit for bit what its member
// ops give run one by one, on tensors larger than a block (so that blocks,
// threads and tails all take part).
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"

#include "trellis/Common/HalfFloat.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace trellis;
using namespace trellis::runtime;

namespace {

AttrValue text(const std::string &value) {
  AttrValue attr;
  attr.kind = AttrValue::Kind::String;
  attr.text = value;
  return attr;
}

class Buffers {
public:
  Buffers() : device_(std::move(*(*findBackend("cpu"))->createDevice({2}))) {}

  int64_t add(const std::vector<int64_t> &shape, DType dtype, int seed) {
    BufferDesc desc{shape, dtype};
    memory_.push_back(std::move(
        *device_->allocate(desc.numElements() * dtypeBytes(dtype))));
    tensors_.emplace_back(desc, memory_.back()->data());
    std::vector<float> values(desc.numElements());
    uint32_t state = seed * 2654435761u + 1;
    for (float &value : values) {
      state = state * 1664525u + 1013904223u;
      value = static_cast<float>(state >> 8) / float(1 << 24) * 4 - 2;
    }
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      bits[i] = floatToBfloat16(values[i]);
    EXPECT_TRUE(device_
                    ->copyFromHost(dtype == DType::BF16
                                       ? static_cast<const void *>(bits.data())
                                       : values.data(),
                                   tensors_.back())
                    .ok());
    return tensors_.size() - 1;
  }

  void run(const std::string &op, std::vector<int64_t> inputs, int64_t output,
           std::map<std::string, AttrValue> attrs = {}) {
    Instruction instruction;
    instruction.op = op;
    instruction.inputs = std::move(inputs);
    instruction.outputs = {output};
    instruction.attrs = std::move(attrs);
    AxisList axes;
    Status status = device_->launch(KernelArgs{instruction, tensors_, axes});
    ASSERT_TRUE(status.ok()) << op << ": " << status.message();
  }

  void fused(std::vector<int64_t> inputs, int64_t output,
             std::vector<std::string> program) {
    AttrValue attr;
    attr.kind = AttrValue::Kind::Strings;
    attr.texts = std::move(program);
    run("fused_elementwise", std::move(inputs), output, {{"program", attr}});
  }

  void expectSameBits(int64_t expected, int64_t found) {
    const Tensor &a = tensors_[expected], &b = tensors_[found];
    ASSERT_EQ(a.bytes(), b.bytes());
    std::vector<char> x(a.bytes()), y(b.bytes());
    ASSERT_TRUE(device_->copyToHost(a, x.data()).ok());
    ASSERT_TRUE(device_->copyToHost(b, y.data()).ok());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0);
  }

private:
  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<DeviceAllocation>> memory_;
  std::vector<Tensor> tensors_;
};

const std::vector<int64_t> kRows{3, 1000, 8}; // 24000 elements, 6 blocks

TEST(FusedElementwiseTest, BiasGelu) {
  Buffers b;
  int64_t x = b.add(kRows, DType::F32, 1), bias = b.add({8}, DType::F32, 2);
  int64_t sum = b.add(kRows, DType::F32, 0), gelu = b.add(kRows, DType::F32, 0),
          fused = b.add(kRows, DType::F32, 0);
  b.run("add", {x, bias}, sum);
  b.run("gelu_tanh", {sum}, gelu);
  b.fused({x, bias}, fused, {"add %0 %1", "gelu_tanh %2"});
  b.expectSameBits(gelu, fused);
}

TEST(FusedElementwiseTest, GeluBackwardScaleResidual) {
  Buffers b;
  int64_t x = b.add(kRows, DType::F32, 3), dy = b.add(kRows, DType::F32, 4),
          r = b.add(kRows, DType::F32, 5);
  int64_t grad = b.add(kRows, DType::F32, 0),
          scaled = b.add(kRows, DType::F32, 0),
          sum = b.add(kRows, DType::F32, 0), fused = b.add(kRows, DType::F32, 0);
  AttrValue factor;
  factor.kind = AttrValue::Kind::Real;
  factor.real = 0.125;
  b.run("unary_grad", {x, dy}, grad, {{"function", text("gelu_tanh")}});
  b.run("scale", {grad}, scaled, {{"factor", factor}});
  b.run("add", {scaled, r}, sum);
  b.fused({x, dy, r}, fused,
          {"unary_grad gelu_tanh %0 %1", "scale %3 0.125", "add %4 %2"});
  b.expectSameBits(sum, fused);
}

TEST(FusedElementwiseTest, SwiGluAndBroadcastsFromBothSides) {
  Buffers b;
  int64_t gate = b.add(kRows, DType::F32, 6), up = b.add(kRows, DType::F32, 7);
  int64_t silu = b.add(kRows, DType::F32, 0), product = b.add(kRows, DType::F32, 0),
          fused = b.add(kRows, DType::F32, 0);
  b.run("silu", {gate}, silu);
  b.run("mul", {silu, up}, product);
  b.fused({gate, up}, fused, {"silu %0", "mul %2 %1"});
  b.expectSameBits(product, fused);
  // [3, 1, 8] against [1000, 1]: the result [3, 1000, 8].
  int64_t left = b.add({3, 1, 8}, DType::F32, 8),
          right = b.add({1000, 1}, DType::F32, 9);
  int64_t diff = b.add(kRows, DType::F32, 0), ratio = b.add(kRows, DType::F32, 0),
          top = b.add(kRows, DType::F32, 0), fusedTop = b.add(kRows, DType::F32, 0);
  b.run("sub", {left, right}, diff);
  b.run("div", {diff, right}, ratio);
  b.run("maximum", {ratio, left}, top);
  b.fused({left, right}, fusedTop,
          {"sub %0 %1", "div %2 %1", "maximum %3 %0"});
  b.expectSameBits(top, fusedTop);
}

TEST(FusedElementwiseTest, Bf16ChainRoundsLikeItsMembers) {
  Buffers b;
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
  b.fused({x, y, bias}, fused,
          {"add %0 %1", "cast f32 %3", "add %4 %2", "cast bf16 %5",
           "gelu_tanh %6"});
  b.expectSameBits(activated, fused);
}

} // namespace
