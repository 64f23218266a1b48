//===- KernelTesting.h - Kernel launches on host-filled tensors -*- C++ -*-===//
//
// What the kernel tests share: attribute values, tests run once per
// registered backend, and tensors on a backend's device filled from a seed,
// with single-instruction launches on them.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_UNITTESTS_KERNELTESTING_H
#define TRELLIS_RUNTIME_UNITTESTS_KERNELTESTING_H

#include "trellis/Runtime/Backend.h"

#include "trellis/Common/HalfFloat.h"

#include <gtest/gtest.h>

#include <optional>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trellis::runtime::testing {

inline AttrValue real(double value) { return AttrValue::ofReal(value); }
inline AttrValue integer(int64_t value) { return AttrValue::ofInt(value); }
inline AttrValue integers(std::vector<int64_t> values) {
  return AttrValue::ofInts(std::move(values));
}
inline AttrValue reals(std::vector<double> values) {
  return AttrValue::ofReals(std::move(values));
}
inline AttrValue flag(bool value) { return AttrValue::ofBool(value); }
inline AttrValue text(const std::string &value) {
  return AttrValue::ofString(value);
}
inline AttrValue texts(std::vector<std::string> values) {
  return AttrValue::ofStrings(std::move(values));
}

/// The names of every registered backend.
inline std::vector<std::string> backendNames() {
  std::vector<std::string> names;
  for (const Backend *backend : registeredBackends())
    names.push_back(backend->name());
  return names;
}

/// Why a device of `backend` cannot be made on this machine (a GPU
/// backend without a GPU), or nullopt when it can.
inline std::optional<std::string> unavailable(const std::string &backend) {
  StatusOr<const Backend *> found = findBackend(backend);
  if (!found.ok())
    return found.status().message();
  StatusOr<std::unique_ptr<Device>> device = (*found)->createDevice({2});
  if (!device.ok())
    return device.status().message();
  return std::nullopt;
}

/// A kernel test run once per registered backend: GetParam() names it.
/// On a machine that cannot make the backend's device, the test is
/// skipped, saying why.
class EveryBackend : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    if (std::optional<std::string> reason = unavailable(GetParam()))
      GTEST_SKIP() << GetParam() << " skipped: " << *reason;
  }
};

/// Instantiates `suite` (derived from EveryBackend) on every registered
/// backend, each test named after it ("Backends/Suite.Test/cpu").
#define TRELLIS_ON_EVERY_BACKEND(suite)                                        \
  INSTANTIATE_TEST_SUITE_P(                                                    \
      Backends, suite,                                                         \
      ::testing::ValuesIn(::trellis::runtime::testing::backendNames()),        \
      [](const ::testing::TestParamInfo<std::string> &info) {                  \
        return info.param;                                                     \
      })

/// Tensors on a device of backend `backend` with `threads` threads.
class DeviceTensors {
public:
  explicit DeviceTensors(int threads = 2, const std::string &backend = "cpu")
      : device_(
            std::move(*(*findBackend(backend))->createDevice({threads}))) {}

  /// A new tensor of `shape` and `dtype`, filled with values in [-2, 2)
  /// from `seed` (rounded to f16 precision: f32 and f16 hold them exactly,
  /// a bf16 tensor rounds them once more) or zeros for seed 0; returns its
  /// index.
  int64_t add(const std::vector<int64_t> &shape, DType dtype, int seed = 0) {
    BufferDesc desc{shape, dtype};
    memory_.push_back(std::move(
        *device_->allocate(desc.numElements() * dtypeBytes(dtype))));
    tensors_.emplace_back(desc, memory_.back()->data());
    std::vector<float> values(desc.numElements(), 0.0f);
    uint32_t state = seed * 2654435761u + 1;
    if (seed != 0)
      for (float &value : values) {
        state = state * 1664525u + 1013904223u;
        value = halfToFloat(floatToHalf(
            static_cast<float>(state >> 8) / float(1 << 24) * 4 - 2));
      }
    set(tensors_.size() - 1, values);
    return tensors_.size() - 1;
  }

  /// An i32 tensor of `values`.
  int64_t addIds(const std::vector<int32_t> &values) {
    BufferDesc desc{{static_cast<int64_t>(values.size())}, DType::I32};
    memory_.push_back(
        std::move(*device_->allocate(values.size() * sizeof(int32_t))));
    tensors_.emplace_back(desc, memory_.back()->data());
    EXPECT_TRUE(device_->copyFromHost(values.data(), tensors_.back()).ok());
    return tensors_.size() - 1;
  }

  /// Tensor `id` = `values`, rounded to its dtype.
  void set(int64_t id, const std::vector<float> &values) {
    Tensor &tensor = tensors_[id];
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      bits[i] = tensor.desc().dtype == DType::F16 ? floatToHalf(values[i])
                                                  : floatToBfloat16(values[i]);
    bool wide = tensor.desc().dtype == DType::F32;
    EXPECT_TRUE(device_
                    ->copyFromHost(wide ? static_cast<const void *>(
                                              values.data())
                                        : bits.data(),
                                   tensor)
                    .ok());
  }

  /// Launches one instruction; its status.
  Status launch(const std::string &op, std::vector<int64_t> inputs,
                std::vector<int64_t> outputs, AttrMap attrs = {}) {
    Instruction instruction;
    instruction.op = op;
    instruction.inputs = std::move(inputs);
    instruction.outputs = std::move(outputs);
    instruction.attrs = std::move(attrs);
    AxisList axes;
    return device_->launch(KernelArgs{instruction, tensors_, axes});
  }

  /// Launches one instruction that must succeed.
  void run(const std::string &op, std::vector<int64_t> inputs,
           std::vector<int64_t> outputs, AttrMap attrs = {}) {
    Status status =
        launch(op, std::move(inputs), std::move(outputs), std::move(attrs));
    ASSERT_TRUE(status.ok()) << op << ": " << status.message();
  }
  void run(const std::string &op, std::vector<int64_t> inputs, int64_t output,
           AttrMap attrs = {}) {
    run(op, std::move(inputs), std::vector<int64_t>{output}, std::move(attrs));
  }

  /// A copy of `id` in `dtype` (a `cast`).
  int64_t cast(int64_t id, DType dtype) {
    int64_t copy = add(tensors_[id].shape(), dtype);
    run("cast", {id}, copy);
    return copy;
  }

  std::vector<char> bytes(int64_t id) {
    std::vector<char> data(tensors_[id].bytes());
    EXPECT_TRUE(device_->copyToHost(tensors_[id], data.data()).ok());
    return data;
  }

  /// Tensor `id`'s values as fp32.
  std::vector<float> floats(int64_t id) {
    int64_t wide =
        tensors_[id].desc().dtype == DType::F32 ? id : cast(id, DType::F32);
    std::vector<char> data = bytes(wide);
    std::vector<float> values(data.size() / sizeof(float));
    std::memcpy(values.data(), data.data(), data.size());
    return values;
  }

  void expectSameBits(int64_t expected, int64_t found) {
    EXPECT_EQ(bytes(expected), bytes(found));
  }

private:
  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<DeviceAllocation>> memory_;
  std::vector<Tensor> tensors_;
};

} // namespace trellis::runtime::testing

#endif // TRELLIS_RUNTIME_UNITTESTS_KERNELTESTING_H
