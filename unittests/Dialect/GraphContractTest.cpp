//===- GraphContractTest.cpp - Graph ops against the plan op contract -----===//

#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

namespace {

TEST(GraphContractTest, EveryGraphOpHasAPlanContract) {
  mlir::MLIRContext context;
  context.loadDialect<trellis::graph::GraphDialect>();
  int graphOps = 0;
  for (mlir::RegisteredOperationName name :
       context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "graph")
      continue;
    ++graphOps;
    llvm::StringRef planName =
        trellis::graph::planOpName(name.getStringRef().split('.').second);
    const trellis::OpContract *contract =
        trellis::findOpContract(planName.str());
    ASSERT_NE(contract, nullptr)
        << name.getStringRef().str() << " has no plan contract '"
        << planName.str() << "'";
    EXPECT_FALSE(contract->collective) << planName.str();
  }
  EXPECT_EQ(graphOps, 52);
}

TEST(GraphContractTest, ElementTypesRoundTrip) {
  mlir::MLIRContext context;
  for (trellis::ElementType type :
       {trellis::ElementType::F32, trellis::ElementType::BF16,
        trellis::ElementType::F16, trellis::ElementType::I32})
    EXPECT_EQ(trellis::graph::toElementType(
                  trellis::graph::fromElementType(&context, type)),
              type);
  EXPECT_EQ(trellis::graph::toElementType(mlir::Float64Type::get(&context)),
            std::nullopt);
}

} // namespace
