//===- BackendTest.cpp - The backends against the plan op contract --------===//

#include "trellis/Runtime/Backend.h"

#include "KernelTesting.h"

#include "trellis/Common/HalfFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

using namespace trellis;
using namespace trellis::runtime;

namespace {

class BackendKernels : public trellis::runtime::testing::EveryBackend {};
TRELLIS_ON_EVERY_BACKEND(BackendKernels);

TEST_P(BackendKernels, EveryComputePlanOpHasAKernel) {
  {
    const Backend *backend = *findBackend(GetParam());
    StatusOr<std::unique_ptr<Device>> device = backend->createDevice({});
    ASSERT_TRUE(device.ok()) << device.status().message();
    int compute = 0;
    for (const OpContract &contract : opContracts()) {
      // Collectives and transfers run through the communicator.
      if (contract.collective)
        continue;
      ++compute;
      EXPECT_TRUE((*device)->hasKernel(contract.name))
          << backend->name() << " has no kernel for plan op '"
          << contract.name << "'";
    }
    EXPECT_GT(compute, 40);
    EXPECT_FALSE((*device)->hasKernel("conv2d"));
  }
}

TEST(BackendTest, UnknownBackendsAreNamedWithTheAvailableOnes) {
  StatusOr<const Backend *> missing = findBackend("tpu");
  ASSERT_FALSE(missing.ok());
  std::string names;
  for (const Backend *backend : registeredBackends())
    names += (names.empty() ? "" : ", ") + backend->name();
  EXPECT_EQ(missing.status().message(),
            "unknown device 'tpu': this runtime has " + names);
  EXPECT_EQ(names.rfind("cpu", 0), 0u) << "the CPU backend comes first";
  StatusOr<const Backend *> cpu = findBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  StatusOr<std::unique_ptr<Device>> device = (*cpu)->createDevice({0, 0});
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().message(), "expected --threads >= 1, found 0");
}

TEST(BackendTest, CpuDeviceMemoryAndStreams) {
  StatusOr<std::unique_ptr<Device>> device =
      (*findBackend("cpu"))->createDevice({});
  ASSERT_TRUE(device.ok());
  StatusOr<std::unique_ptr<DeviceAllocation>> memory = (*device)->allocate(12);
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*memory)->data()) % 64, 0u);
  BufferDesc desc{{3}, DType::F32};
  Tensor tensor(desc, (*memory)->data());
  float zeros[3] = {1, 1, 1};
  ASSERT_TRUE((*device)->copyToHost(tensor, zeros).ok());
  EXPECT_EQ(zeros[0] + zeros[1] + zeros[2], 0.0f);
  float values[3] = {1, 2, 3}, back[3] = {};
  ASSERT_TRUE((*device)->copyFromHost(values, tensor).ok());
  ASSERT_TRUE((*device)->copyToHost(tensor, back).ok());
  EXPECT_EQ(back[2], 3.0f);
  // Communication runs in order; after a failure, later work is skipped
  // and reports that failure; synchronize forgets it.
  int ran = 0;
  int64_t first = (*device)->enqueueCommunication([&] {
    ++ran;
    return Status::success();
  });
  int64_t failing = (*device)->enqueueCommunication(
      [] { return Status::error("peer 1 died"); });
  int64_t skipped = (*device)->enqueueCommunication([&] {
    ++ran;
    return Status::success();
  });
  EXPECT_TRUE((*device)->waitCommunication(first).ok());
  EXPECT_EQ((*device)->waitCommunication(failing).message(), "peer 1 died");
  EXPECT_EQ((*device)->waitCommunication(skipped).message(), "peer 1 died");
  EXPECT_EQ((*device)->synchronize().message(), "peer 1 died");
  EXPECT_EQ(ran, 1);
  int64_t fresh = (*device)->enqueueCommunication([] {
    return Status::success();
  });
  EXPECT_TRUE((*device)->waitCommunication(fresh).ok());
  EXPECT_TRUE((*device)->synchronize().ok());
}

} // namespace

namespace {

/// The CPU's matmul of bf16 operands (oneDNN) against its f32 matmul of the
/// same (bf16-representable) values: every layout it takes (transposes,
/// batches, a shared right-hand side) agrees within bf16's rounding of the
/// result.
TEST(BackendTest, Bf16MatmulMatchesF32) {
  StatusOr<std::unique_ptr<Device>> device =
      (*findBackend("cpu"))->createDevice({});
  ASSERT_TRUE(device.ok());
  struct Case {
    std::vector<int64_t> lhs, rhs;
    bool transposeLhs, transposeRhs;
  };
  for (const Case &c : std::vector<Case>{{{5, 7}, {7, 3}, false, false},
                                         {{7, 5}, {7, 3}, true, false},
                                         {{5, 7}, {3, 7}, false, true},
                                         {{2, 4, 5, 7}, {7, 3}, false, false},
                                         {{2, 7, 5}, {2, 7, 3}, true, false},
                                         {{2, 7, 5}, {7, 3}, true, false},
                                         {{2, 5, 7}, {2, 3, 7}, false, true}}) {
    std::vector<int64_t> out = c.lhs;
    size_t rank = out.size();
    int64_t m = c.lhs[rank - (c.transposeLhs ? 1 : 2)];
    int64_t n = c.rhs[c.rhs.size() - (c.transposeRhs ? 2 : 1)];
    out[rank - 2] = m;
    out[rank - 1] = n;
    std::vector<std::unique_ptr<DeviceAllocation>> memory;
    auto make = [&](const std::vector<int64_t> &shape, DType dtype) {
      BufferDesc desc{shape, dtype};
      memory.push_back(std::move(
          *(*device)->allocate(desc.numElements() * dtypeBytes(dtype))));
      return Tensor(desc, memory.back()->data());
    };
    std::vector<Tensor> wide = {make(c.lhs, DType::F32),
                                make(c.rhs, DType::F32), make(out, DType::F32)};
    std::vector<Tensor> narrow = {make(c.lhs, DType::BF16),
                                  make(c.rhs, DType::BF16),
                                  make(out, DType::BF16)};
    for (int t = 0; t < 2; ++t) {
      std::vector<float> values(wide[t].size());
      std::vector<uint16_t> bits(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        bits[i] = trellis::floatToBfloat16(
            static_cast<float>((i * 37 + t * 11) % 23) / 8.0f - 1.0f);
        values[i] = trellis::bfloat16ToFloat(bits[i]);
      }
      ASSERT_TRUE((*device)->copyFromHost(values.data(), wide[t]).ok());
      ASSERT_TRUE((*device)->copyFromHost(bits.data(), narrow[t]).ok());
    }
    Instruction matmul;
    matmul.op = "matmul";
    matmul.inputs = {0, 1};
    matmul.outputs = {2};
    AttrValue flag;
    flag.kind = AttrValue::Kind::Bool;
    flag.flag = c.transposeLhs;
    matmul.attrs["transpose_lhs"] = flag;
    flag.flag = c.transposeRhs;
    matmul.attrs["transpose_rhs"] = flag;
    AxisList axes;
    ASSERT_TRUE((*device)->launch(KernelArgs{matmul, wide, axes}).ok());
    Status status = (*device)->launch(KernelArgs{matmul, narrow, axes});
    ASSERT_TRUE(status.ok()) << status.message();
    std::vector<float> expected(wide[2].size());
    std::vector<uint16_t> found(expected.size());
    ASSERT_TRUE((*device)->copyToHost(wide[2], expected.data()).ok());
    ASSERT_TRUE((*device)->copyToHost(narrow[2], found.data()).ok());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_NEAR(trellis::bfloat16ToFloat(found[i]), expected[i],
                  std::abs(expected[i]) * 0x1p-8f + 1e-6f)
          << "element " << i << " of case " << c.lhs.size() << "-d";
  }
}

} // namespace

namespace {

/// Layout ops move 16-bit elements themselves: their bf16 results are the
/// f32 results' values exactly.
TEST(BackendTest, LayoutOpsMoveBf16Elements) {
  StatusOr<std::unique_ptr<Device>> device =
      (*findBackend("cpu"))->createDevice({});
  ASSERT_TRUE(device.ok());
  auto ints = [](std::vector<int64_t> values) {
    AttrValue value;
    value.kind = AttrValue::Kind::Ints;
    value.ints = std::move(values);
    return value;
  };
  AttrValue dim;
  dim.kind = AttrValue::Kind::Int;
  dim.integer = 1;
  struct Case {
    std::string op;
    std::vector<std::vector<int64_t>> inputs;
    std::vector<int64_t> output;
    std::map<std::string, AttrValue> attrs;
  };
  std::vector<Case> cases = {
      {"transpose", {{2, 3, 4}}, {4, 2, 3}, {{"permutation", ints({2, 0, 1})}}},
      {"slice", {{4, 5}}, {2, 3}, {{"offsets", ints({1, 2})}, {"sizes", ints({2, 3})}}},
      {"pad", {{2, 3}}, {3, 6}, {{"low", ints({1, 2})}, {"high", ints({0, 1})}}},
      {"concat", {{2, 3}, {2, 1}}, {2, 4}, {{"dim", dim}}},
      {"broadcast_to", {{1, 3}}, {4, 3}, {{"shape", ints({4, 3})}}},
      {"reshape", {{2, 6}}, {3, 4}, {{"shape", ints({3, 4})}}},
  };
  for (const Case &c : cases) {
    std::vector<std::unique_ptr<DeviceAllocation>> memory;
    auto make = [&](const std::vector<int64_t> &shape, DType dtype) {
      BufferDesc desc{shape, dtype};
      memory.push_back(std::move(
          *(*device)->allocate(desc.numElements() * dtypeBytes(dtype))));
      return Tensor(desc, memory.back()->data());
    };
    std::vector<Tensor> wide, narrow;
    Instruction instruction;
    instruction.op = c.op;
    instruction.attrs = c.attrs;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      wide.push_back(make(c.inputs[i], DType::F32));
      narrow.push_back(make(c.inputs[i], DType::BF16));
      std::vector<float> values(wide.back().size());
      std::vector<uint16_t> bits(values.size());
      for (size_t e = 0; e < values.size(); ++e) {
        values[e] = static_cast<float>(e + 10 * i + 1);
        bits[e] = trellis::floatToBfloat16(values[e]);
      }
      ASSERT_TRUE((*device)->copyFromHost(values.data(), wide.back()).ok());
      ASSERT_TRUE((*device)->copyFromHost(bits.data(), narrow.back()).ok());
      instruction.inputs.push_back(static_cast<int64_t>(i));
    }
    wide.push_back(make(c.output, DType::F32));
    narrow.push_back(make(c.output, DType::BF16));
    instruction.outputs = {static_cast<int64_t>(c.inputs.size())};
    AxisList axes;
    ASSERT_TRUE((*device)->launch(KernelArgs{instruction, wide, axes}).ok());
    ASSERT_TRUE((*device)->launch(KernelArgs{instruction, narrow, axes}).ok());
    std::vector<float> expected(wide.back().size());
    std::vector<uint16_t> found(expected.size());
    ASSERT_TRUE((*device)->copyToHost(wide.back(), expected.data()).ok());
    ASSERT_TRUE((*device)->copyToHost(narrow.back(), found.data()).ok());
    for (size_t e = 0; e < expected.size(); ++e)
      EXPECT_EQ(trellis::bfloat16ToFloat(found[e]), expected[e])
          << c.op << " element " << e;
  }
}

/// firstNonFinite tests exponent bits in place: every float dtype, a NaN
/// or an infinity anywhere (past the first of the CPU's 65536-element
/// chunks too) is found, large finite values and subnormals are finite.
TEST(BackendTest, FirstNonFiniteFindsInfinitiesAndNaNs) {
  StatusOr<std::unique_ptr<Device>> device =
      (*findBackend("cpu"))->createDevice({2, 0});
  ASSERT_TRUE(device.ok());
  const int64_t count = 200000;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dtype));
    StatusOr<std::unique_ptr<DeviceAllocation>> memory =
        (*device)->allocate(count * dtypeBytes(dtype));
    ASSERT_TRUE(memory.ok());
    Tensor tensor(BufferDesc{{count}, dtype}, (*memory)->data());
    auto set = [&](int64_t i, float value) {
      if (dtype == DType::F32)
        tensor.f32()[i] = value;
      else if (dtype == DType::BF16)
        static_cast<uint16_t *>(tensor.raw())[i] = floatToBfloat16(value);
      else
        static_cast<uint16_t *>(tensor.raw())[i] = floatToHalf(value);
    };
    for (int64_t i = 0; i < count; ++i)
      set(i, (i % 2 ? -1.0f : 1.0f) * (i % 7 ? 1e-6f * i : 6.0e4f));
    set(5, 1e-40f); // subnormal in f32, zero or subnormal in 16 bits
    StatusOr<int64_t> first = (*device)->firstNonFinite({&tensor});
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(*first, -1);
    for (float bad : {std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()})
      for (int64_t at : {int64_t(0), int64_t(70000), count - 1}) {
        set(at, bad);
        first = (*device)->firstNonFinite({&tensor});
        ASSERT_TRUE(first.ok());
        EXPECT_EQ(*first, 0) << bad << " at " << at;
        EXPECT_FALSE(allFiniteValues(dtype, tensor.raw(), count));
        set(at, 1.0f);
      }
    EXPECT_TRUE(allFiniteValues(dtype, tensor.raw(), count));
  }
}

/// Of several tensors, the first non-finite one is named, whatever
/// follows it; none such gives -1.
TEST(BackendTest, FirstNonFiniteNamesTheFirstOfSeveral) {
  StatusOr<std::unique_ptr<Device>> device =
      (*findBackend("cpu"))->createDevice({});
  ASSERT_TRUE(device.ok());
  std::vector<std::unique_ptr<DeviceAllocation>> memory;
  std::vector<Tensor> tensors;
  for (int t = 0; t < 4; ++t) {
    StatusOr<std::unique_ptr<DeviceAllocation>> allocation =
        (*device)->allocate(8 * sizeof(float));
    ASSERT_TRUE(allocation.ok());
    memory.push_back(std::move(*allocation));
    tensors.emplace_back(BufferDesc{{8}, DType::F32}, memory.back()->data());
    for (int i = 0; i < 8; ++i)
      tensors.back().f32()[i] = 1.0f;
  }
  std::vector<const Tensor *> all = {&tensors[0], &tensors[1], &tensors[2],
                                     &tensors[3]};
  StatusOr<int64_t> first = (*device)->firstNonFinite(all);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, -1);
  tensors[3].f32()[7] = std::numeric_limits<float>::quiet_NaN();
  tensors[1].f32()[2] = std::numeric_limits<float>::infinity();
  first = (*device)->firstNonFinite(all);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 1);
  first = (*device)->firstNonFinite({});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, -1);
}

} // namespace
