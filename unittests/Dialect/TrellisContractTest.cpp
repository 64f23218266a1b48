//===- TrellisContractTest.cpp - Trellis collectives against their rows ---===//
//
// The trellis dialect's collectives are verified by their op table rows
// (TrellisOps.cpp): every one has a collective row, and every collective
// row but the compute ones is a trellis op.
//
//===----------------------------------------------------------------------===//

#include "trellis/Common/OpContract.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace {

TEST(TrellisContractTest, EveryCollectiveIsACollectiveRow) {
  mlir::MLIRContext context;
  context.loadDialect<trellis::TrellisDialect>();
  std::set<std::string> collectives;
  for (mlir::RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "trellis")
      continue;
    std::string op = name.getStringRef().split('.').second.str();
    // The mesh and shard ops annotate; they compute nothing.
    if (op == "mesh" || op == "shard")
      continue;
    collectives.insert(op);
    const trellis::OpContract *contract = trellis::findOpContract(op);
    ASSERT_NE(contract, nullptr) << "trellis." << op << " has no row";
    EXPECT_TRUE(contract->collective) << op;
  }
  for (const trellis::OpContract &contract : trellis::opContracts()) {
    if (contract.collective) {
      EXPECT_TRUE(collectives.count(contract.name))
          << "row '" << contract.name << "' has no trellis op";
    }
  }
}

} // namespace
