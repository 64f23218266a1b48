//===- GraphContractTest.cpp - Graph ops against the plan op contract -----===//

#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace {

/// The graph dialect's registered ops by plan op name.
std::map<std::string, mlir::RegisteredOperationName>
graphOpsByPlanName(mlir::MLIRContext &context) {
  context.loadDialect<trellis::graph::GraphDialect>();
  std::map<std::string, mlir::RegisteredOperationName> ops;
  for (mlir::RegisteredOperationName name :
       context.getRegisteredOperations())
    if (name.getDialectNamespace() == "graph")
      ops.emplace(trellis::graph::planOpName(
                      name.getStringRef().split('.').second)
                      .str(),
                  name);
  return ops;
}

TEST(GraphContractTest, EveryGraphOpHasAComputeRow) {
  mlir::MLIRContext context;
  for (const auto &[planName, name] : graphOpsByPlanName(context)) {
    const trellis::OpContract *contract = trellis::findOpContract(planName);
    ASSERT_NE(contract, nullptr)
        << name.getStringRef().str() << " has no row '" << planName << "'";
    EXPECT_FALSE(contract->collective) << planName;
  }
}

TEST(GraphContractTest, EveryComputeRowIsAGraphOp) {
  mlir::MLIRContext context;
  std::map<std::string, mlir::RegisteredOperationName> ops =
      graphOpsByPlanName(context);
  size_t computeRows = 0;
  for (const trellis::OpContract &contract : trellis::opContracts()) {
    if (contract.collective)
      continue;
    ++computeRows;
    EXPECT_TRUE(ops.count(contract.name))
        << "row '" << contract.name << "' has no graph op";
  }
  EXPECT_EQ(ops.size(), computeRows);
}

// The graph dialect's UnaryFunction enum (GraphEnums.td, the attribute of
// graph.unary_grad) is the unary family's list (UnaryFunctions.h): the same
// names in the same order.
TEST(GraphContractTest, UnaryFunctionEnumIsTheUnaryFamily) {
  size_t index = 0;
  for (trellis::UnaryFunction function : trellis::kUnaryFunctions) {
    std::optional<trellis::graph::UnaryFunction> graphFunction =
        trellis::graph::symbolizeUnaryFunction(
            trellis::unaryFunctionName(function));
    ASSERT_TRUE(graphFunction.has_value())
        << "GraphEnums.td has no case '"
        << trellis::unaryFunctionName(function) << "'";
    EXPECT_EQ(static_cast<size_t>(*graphFunction), index)
        << trellis::unaryFunctionName(function);
    ++index;
  }
  EXPECT_EQ(trellis::graph::getMaxEnumValForUnaryFunction() + 1, index);
}

TEST(GraphContractTest, OdsAttributesAreTheRowsAttributes) {
  // Every inherent attribute of a graph op is an attribute of its row, and
  // every attribute the row requires is one of the op's (rows may have
  // optional attributes the compiler sets late, such as `axes`).
  mlir::MLIRContext context;
  for (const auto &[planName, name] : graphOpsByPlanName(context)) {
    const trellis::OpContract *contract = trellis::findOpContract(planName);
    ASSERT_NE(contract, nullptr);
    std::set<std::string> ods;
    for (mlir::StringAttr attr : name.getAttributeNames())
      ods.insert(attr.getValue().str());
    std::set<std::string> row;
    for (const trellis::AttrSpec &spec : contract->attrs) {
      row.insert(spec.name);
      if (spec.required) {
        EXPECT_TRUE(ods.count(spec.name))
            << planName << " requires '" << spec.name
            << "', which the graph op lacks";
      }
    }
    for (const std::string &attr : ods)
      EXPECT_TRUE(row.count(attr))
          << name.getStringRef().str() << " has attribute '" << attr
          << "', which row '" << planName << "' lacks";
  }
}

TEST(GraphContractTest, RowIdsAreTheirIndices) {
  const std::vector<trellis::OpContract> &table = trellis::opContracts();
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].id, i);
    EXPECT_EQ(&trellis::opContract(table[i].id), &table[i]);
    EXPECT_EQ(trellis::findOpContract(table[i].name), &table[i]);
    EXPECT_EQ(static_cast<bool>(table[i].factors), !table[i].collective)
        << table[i].name;
    EXPECT_TRUE(static_cast<bool>(table[i].cost)) << table[i].name;
  }
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
