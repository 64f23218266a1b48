//===- PrintOpCosts.cpp - Op costs as remarks -----------------------------===//

#include "trellis/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/Support/FormatVariadic.h"

namespace trellis::graph {
#define GEN_PASS_DEF_PRINTOPCOSTSPASS
#include "trellis/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace trellis::graph

using namespace mlir;
using namespace trellis::graph;

namespace {
struct PrintOpCostsPass
    : public trellis::graph::impl::PrintOpCostsPassBase<PrintOpCostsPass> {
  void runOnOperation() override {
    getOperation()->walk([](FunctionOpInterface function) {
      OpCost total;
      function->walk([&](CostOpInterface op) {
        OpCost cost = op.getCost();
        op->emitRemark() << llvm::formatv(
            "cost: {0} flops, {1} bytes read, {2} bytes written",
            static_cast<int64_t>(cost.flops), cost.bytesRead,
            cost.bytesWritten);
        total += cost;
      });
      function->emitRemark() << llvm::formatv(
          "total cost: {0} flops, {1} bytes read, {2} bytes written",
          static_cast<int64_t>(total.flops), total.bytesRead,
          total.bytesWritten);
    });
  }
};
} // namespace
