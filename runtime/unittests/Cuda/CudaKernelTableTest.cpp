//===- CudaKernelTableTest.cpp - The CUDA backend's kernels by op id ------===//
//
// The table is host code: a CPU checks which plan ops the CUDA backend has
// kernels for (kernel files register families and members, so every row
// of one they register has its kernel).
//
//===----------------------------------------------------------------------===//

#include "../../cuda/CudaSupport.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace trellis;
using namespace trellis::runtime::cuda;

namespace {

TEST(CudaKernelTableTest, EveryComputeOpHasAKernel) {
  std::vector<std::string> missing;
  for (const OpContract &contract : opContracts())
    if (!contract.collective && !cudaKernels().find(contract.name))
      missing.push_back(contract.name);
  EXPECT_EQ(missing, std::vector<std::string>());
  EXPECT_EQ(cudaKernels().ops().size(), 62u);
}

TEST(CudaKernelTableTest, KernelsAreFoundByIdAndByName) {
  const OpContract *route = findOpContract("moe_route_grad");
  ASSERT_NE(route, nullptr);
  const CudaKernelEntry *byId = cudaKernels().find(route->id);
  ASSERT_NE(byId, nullptr);
  EXPECT_EQ(byId, cudaKernels().find("moe_route_grad"));
  EXPECT_EQ(cudaKernels().find("conv2d"), nullptr);
  EXPECT_EQ(cudaKernels().find(static_cast<OpId>(opContracts().size())),
            nullptr);
  // The expert products' all-to-all dispatch waits on the host, forward
  // and gradient alike.
  EXPECT_NE(cudaKernels().find("expert_matmul")->waitsOnHost, nullptr);
  EXPECT_NE(cudaKernels().find("expert_matmul_weight_grad")->waitsOnHost,
            nullptr);
  EXPECT_EQ(cudaKernels().find("expert_counts")->waitsOnHost, nullptr);
}

} // namespace
