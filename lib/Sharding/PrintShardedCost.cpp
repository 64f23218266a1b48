//===- PrintShardedCost.cpp - The cost query's figures as a remark --------===//

#include "trellis/Sharding/Passes.h"
#include "trellis/Sharding/ShardingCost.h"

#include "llvm/Support/FormatVariadic.h"

namespace trellis {
#define GEN_PASS_DEF_PRINTSHARDEDCOSTPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;

namespace {

struct PrintShardedCostPass
    : public trellis::impl::PrintShardedCostPassBase<PrintShardedCostPass> {
  using PrintShardedCostPassBase::PrintShardedCostPassBase;

  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    trellis::CostQueryOptions options;
    options.pipelineAxis = pipelineAxis;
    options.pieceAxis = pieceAxis;
    options.ringAttention = ringAttention;
    FailureOr<std::vector<trellis::ShardedStepCost>> costs =
        trellis::estimateShardedStep(function, options);
    if (failed(costs))
      return signalPassFailure();
    for (auto [rank, cost] : llvm::enumerate(*costs)) {
      std::string text =
          llvm::formatv("{0}: {1} flops, {2} bytes read, {3} bytes written",
                        costs->size() == 1
                            ? std::string("per rank")
                            : "pipeline rank " + std::to_string(rank),
                        static_cast<int64_t>(cost.flops), cost.bytesRead,
                        cost.bytesWritten)
              .str();
      for (const auto &[key, traffic] : cost.communication)
        text += llvm::formatv("; {0}: {1} calls, {2} bytes, {3} sent", key,
                              traffic.count, traffic.bytes, traffic.wireBytes)
                    .str();
      function.emitRemark(text);
    }
    markAllAnalysesPreserved();
  }
};

} // namespace
