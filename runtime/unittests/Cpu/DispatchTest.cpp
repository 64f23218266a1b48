//===- DispatchTest.cpp - The CPU's kernel table against the op table -----===//
//
// Kernels register by family and member, so every row has the kernel of
// its family (or member): no name can be misspelled, and a new row of a
// registered family needs no registration.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <gtest/gtest.h>

using namespace trellis;
using namespace trellis::runtime::cpu;

namespace {

TEST(DispatchTest, EveryComputeOpHasAKernel) {
  std::vector<std::string> missing;
  for (const OpContract &contract : opContracts())
    if (!contract.collective && !cpuKernels().find(contract.id))
      missing.push_back(contract.name);
  EXPECT_EQ(missing, std::vector<std::string>());
}

TEST(DispatchTest, KernelsAreFoundByIdAndByName) {
  const OpContract *matmul = findOpContract("matmul");
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(cpuKernels().find(matmul->id), nullptr);
  EXPECT_EQ(*cpuKernels().find(matmul->id), runMatmul);
  EXPECT_EQ(findKernel("matmul"), runMatmul);
  EXPECT_EQ(findKernel("matmul_accumulate"), runMatmul);
  EXPECT_EQ(findKernel("conv2d"), nullptr);
  EXPECT_EQ(cpuKernels().find(static_cast<OpId>(opContracts().size())),
            nullptr);
}

runtime::Status forwardKernel(const runtime::KernelArgs &) {
  return runtime::Status::success();
}
runtime::Status gradientKernel(const runtime::KernelArgs &) {
  return runtime::Status::success();
}

// Tests that a member registers its forward and gradient rows apart, and
// a family every row of it.
TEST(DispatchTest, MembersAndFamiliesRegisterTheirRows) {
  KernelTable table;
  auto kernelOf = [&](const char *op) {
    const Kernel *kernel = table.find(op);
    return kernel ? *kernel : nullptr;
  };
  table.addMember(NormKind::Rms, forwardKernel, gradientKernel);
  EXPECT_EQ(kernelOf("rms_norm"), forwardKernel);
  EXPECT_EQ(kernelOf("rms_norm_grad"), gradientKernel);
  EXPECT_EQ(table.find("layer_norm"), nullptr);
  EXPECT_EQ(table.ops(),
            (std::vector<std::string>{"rms_norm", "rms_norm_grad"}));
  table.addFamily(OpFamily::Norm, forwardKernel);
  EXPECT_EQ(kernelOf("layer_norm_grad"), forwardKernel);
  EXPECT_EQ(kernelOf("rms_norm_grad"), forwardKernel);
}

} // namespace
