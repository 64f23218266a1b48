//===- BackendTest.cpp - The backends against the plan op contract --------===//

#include "trellis/Runtime/Backend.h"

#include <gtest/gtest.h>

using namespace trellis;
using namespace trellis::runtime;

namespace {

TEST(BackendTest, EveryComputePlanOpHasAKernelOnEveryBackend) {
  for (const Backend *backend : registeredBackends()) {
    StatusOr<std::unique_ptr<Device>> device = backend->createDevice({});
    ASSERT_TRUE(device.ok()) << device.status().message();
    int compute = 0;
    for (const auto &[name, contract] : opContracts()) {
      // Collectives and transfers run through the communicator.
      if (contract.collective)
        continue;
      ++compute;
      EXPECT_TRUE((*device)->hasKernel(name))
          << backend->name() << " has no kernel for plan op '" << name << "'";
    }
    EXPECT_GT(compute, 40);
    EXPECT_FALSE((*device)->hasKernel("conv2d"));
  }
}

TEST(BackendTest, UnknownBackendsAreNamedWithTheAvailableOnes) {
  StatusOr<const Backend *> missing = findBackend("tpu");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "unknown device 'tpu': this runtime has cpu");
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
