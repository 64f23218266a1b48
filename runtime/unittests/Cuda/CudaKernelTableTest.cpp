//===- CudaKernelTableTest.cpp - The CUDA backend's kernels by op id ------===//
//
// The table is host code: a CPU checks which plan ops the CUDA backend has
// kernels for, and that every name a kernel file registers is a row of the
// op table.
//
//===----------------------------------------------------------------------===//

#include "../../cuda/CudaSupport.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace trellis;
using namespace trellis::runtime::cuda;

namespace {

TEST(CudaKernelTableTest, EveryRegisteredNameIsARow) {
  EXPECT_EQ(cudaKernels().unknown(), std::vector<std::string>());
}

TEST(CudaKernelTableTest, EveryComputeOpHasAKernel) {
  std::vector<std::string> missing;
  for (const OpContract &contract : opContracts())
    if (!contract.collective && !cudaKernels().find(contract.name))
      missing.push_back(contract.name);
  EXPECT_EQ(missing, std::vector<std::string>());
  EXPECT_EQ(cudaKernels().ops().size(), 59u);
}

} // namespace
