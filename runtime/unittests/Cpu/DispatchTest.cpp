//===- DispatchTest.cpp - The CPU's kernel table against the op table -----===//

#include "Kernels.h"

#include <gtest/gtest.h>

using namespace trellis;
using namespace trellis::runtime::cpu;

namespace {

TEST(DispatchTest, EveryRegisteredNameIsARowOfTheOpTable) {
  EXPECT_TRUE(cpuKernels().unknownNames().empty())
      << "registered but not in the op table: "
      << cpuKernels().unknownNames().front();
}

TEST(DispatchTest, KernelsAreFoundByIdAndByName) {
  const OpContract *matmul = findOpContract("matmul");
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(cpuKernels().find(matmul->id), runMatmul);
  EXPECT_EQ(findKernel("matmul"), runMatmul);
  EXPECT_EQ(findKernel("conv2d"), nullptr);
  EXPECT_EQ(cpuKernels().find(static_cast<OpId>(opContracts().size())),
            nullptr);
}

TEST(DispatchTest, AnUnknownNameIsKeptNotRegistered) {
  KernelTable table;
  table.add({"matmul", "conv2d"}, runMatmul);
  ASSERT_EQ(table.unknownNames().size(), 1u);
  EXPECT_EQ(table.unknownNames()[0], "conv2d");
  EXPECT_EQ(table.find(findOpContract("matmul")->id), runMatmul);
}

} // namespace
