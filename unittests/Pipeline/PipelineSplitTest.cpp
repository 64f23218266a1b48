//===- PipelineSplitTest.cpp - A tagged step cut into pipeline stages -----===//

#include "trellis/Pipeline/PipelineSplit.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Dialect/Graph/IR/GraphAttrs.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace mlir;
using namespace trellis;

namespace {

/// An embedding, two layers and a head, each one matmul (with their parts
/// as the importer marks them).
const char *kForward = R"mlir(
func.func @forward(
    %we: tensor<4x4xf32> {graph.role = "param", graph.param = "we", graph.init = "zeros"},
    %w0: tensor<4x4xf32> {graph.role = "param", graph.param = "w0", graph.init = "zeros"},
    %w1: tensor<4x4xf32> {graph.role = "param", graph.param = "w1", graph.init = "zeros"},
    %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %e = graph.matmul %x, %we {graph.part = #graph.part<embedding>} : tensor<2x4xf32>, tensor<4x4xf32>
  %h0 = graph.matmul %e, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x4xf32>
  %h1 = graph.matmul %h0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x4xf32>, tensor<4x4xf32>
  %y = graph.matmul %h1, %we transposed {graph.part = #graph.part<head>} : tensor<2x4xf32>, tensor<4x4xf32>
  %loss = graph.reduce_sum %y dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x4xf32>
  return %loss : tensor<f32>
}
)mlir";

class PipelineSplitTest : public ::testing::Test {
protected:
  void SetUp() override {
    context_.loadDialect<graph::GraphDialect, func::FuncDialect>();
    module_ = parseSourceString<ModuleOp>(kForward, &context_);
    ASSERT_TRUE(module_);
    PassManager pm(&context_);
    AutodiffPassOptions options;
    options.optimizer = "sgd";
    options.microBatches = 2;
    options.tagActions = true;
    pm.addPass(createAutodiffPass(options));
    ASSERT_TRUE(succeeded(pm.run(*module_)));
    step_ = module_->lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(step_);
  }

  /// Splits over 2 ranks, one layer each, 1F1B; collects diagnostics.
  FailureOr<PipelineProgram> split() {
    ScopedDiagnosticHandler handler(&context_, [&](Diagnostic &diagnostic) {
      errors_ += diagnostic.str() + "\n";
      return success();
    });
    PipelineConfig config{ScheduleKind::OneFOneB, {2, 2, 1}, {1, 1}};
    return splitPipeline(step_, config);
  }

  MLIRContext context_;
  OwningOpRef<ModuleOp> module_;
  func::FuncOp step_;
  std::string errors_;
};

TEST_F(PipelineSplitTest, SendsBoundariesAndSharesTheTiedWeight) {
  FailureOr<PipelineProgram> program = split();
  ASSERT_TRUE(succeeded(program)) << errors_;
  ASSERT_EQ(program->streams.size(), 2u);
  // Arguments: we (both ends), w0 (stage 0), w1 (stage 1), x.0 and x.1
  // (stage 0, the embedding reads them).
  EXPECT_EQ(program->argumentRanks,
            (std::vector<std::vector<int64_t>>{{0, 1}, {0}, {1}, {0}, {0}}));
  // The loss on stage 0; each update where its parameter is.
  EXPECT_EQ(program->resultRanks,
            (std::vector<std::vector<int64_t>>{{0}, {0, 1}, {0}, {1}}));
  // Per micro-batch: the activation, its gradient and the loss; then the
  // two partial gradients of the tied weight, one each way.
  int64_t forward = 0, backward = 0;
  for (const StageTransfer &transfer : program->transfers)
    (transfer.from == 0 ? forward : backward) += 1;
  EXPECT_EQ(forward, 2 + 1);
  EXPECT_EQ(backward, 2 + 2 + 1);
  // Every stream's transfers are unique channels.
  std::set<int64_t> channels;
  for (const StageTransfer &transfer : program->transfers)
    EXPECT_TRUE(channels.insert(transfer.channel).second);
}

TEST_F(PipelineSplitTest, CheckerFindsBrokenStreams) {
  FailureOr<PipelineProgram> program = split();
  ASSERT_TRUE(succeeded(program)) << errors_;
  ScopedDiagnosticHandler handler(&context_, [&](Diagnostic &diagnostic) {
    errors_ += diagnostic.str() + "\n";
    return success();
  });
  EXPECT_TRUE(succeeded(verifyPipelineProgram(step_, *program))) << errors_;
  // Stage 0 sends its activations only after waiting for their gradients.
  PipelineProgram late = *program;
  std::stable_partition(
      late.streams[0].begin(), late.streams[0].end(),
      [](const StageItem &item) { return item.kind != StageItem::Kind::Send; });
  EXPECT_TRUE(failed(verifyPipelineProgram(step_, late)));
  EXPECT_NE(errors_.find("deadlocks the pipeline: rank 0 waits for a value "
                         "from rank 1 that is never sent before it"),
            std::string::npos)
      << errors_;
  // A send that is not in any stream.
  PipelineProgram unsent = *program;
  auto send = llvm::find_if(unsent.streams[1], [](const StageItem &item) {
    return item.kind == StageItem::Kind::Send;
  });
  ASSERT_NE(send, unsent.streams[1].end());
  unsent.streams[1].erase(send);
  EXPECT_TRUE(failed(verifyPipelineProgram(step_, unsent)));
  EXPECT_NE(errors_.find("is sent 0 times and received 1 times"),
            std::string::npos)
      << errors_;
}

TEST_F(PipelineSplitTest, DiagnosesAnOpThatRunsTooLate) {
  // Unmarking an op of micro-batch 0 makes it an op of the whole step, run
  // after every micro-batch, while micro-batch 0 still reads it.
  auto layer0 = graph::PartAttr::getLayer(&context_, 0);
  step_.walk([&](Operation *op) {
    auto microBatch = op->getAttrOfType<IntegerAttr>("graph.micro_batch");
    if (graph::getModelPart(op) == layer0 && microBatch &&
        microBatch.getInt() == 0)
      op->removeAttr("graph.micro_batch");
  });
  EXPECT_TRUE(failed(split()));
  EXPECT_NE(errors_.find("before it is made or received there"),
            std::string::npos)
      << errors_;
}

TEST_F(PipelineSplitTest, DiagnosesAMissingPhase) {
  step_.walk([&](Operation *op) { op->removeAttr("graph.phase"); });
  EXPECT_TRUE(failed(split()));
  EXPECT_NE(errors_.find("has a micro-batch but no graph.phase"),
            std::string::npos)
      << errors_;
}

TEST_F(PipelineSplitTest, DiagnosesASplitForOtherStages) {
  ScopedDiagnosticHandler handler(&context_, [&](Diagnostic &diagnostic) {
    errors_ += diagnostic.str() + "\n";
    return success();
  });
  PipelineConfig config{ScheduleKind::OneFOneB, {2, 2, 1}, {1, 1, 0}};
  EXPECT_TRUE(failed(splitPipeline(step_, config)));
  EXPECT_NE(errors_.find("expected layers for 2 virtual stages, found 3"),
            std::string::npos)
      << errors_;
}

} // namespace
