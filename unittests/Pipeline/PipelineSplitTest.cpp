//===- PipelineSplitTest.cpp - A tagged step cut into pipeline stages -----===//

#include "trellis/Pipeline/PipelineSplit.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Pipeline/Passes.h"
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
  void SetUp() override { buildStep(2); }

  /// Differentiates the forward into a step of `microBatches` and cuts it
  /// over 2 ranks, one layer each, for 1F1B.
  void buildStep(int64_t microBatches) {
    context_.loadDialect<graph::GraphDialect, func::FuncDialect>();
    module_ = parseSourceString<ModuleOp>(kForward, &context_);
    ASSERT_TRUE(module_);
    PassManager pm(&context_);
    TrainingOptions options;
    options.optimizer = OptimizerKind::Sgd;
    options.microBatches = microBatches;
    options.pipelined = true;
    buildTrainingPipeline(pm, options);
    AssignStagesPassOptions stages;
    stages.stages = 2;
    stages.layers = {1, 1};
    pm.addPass(createAssignStagesPass(stages));
    ASSERT_TRUE(succeeded(pm.run(*module_)));
    step_ = module_->lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(step_);
  }

  /// Splits, schedules and verifies the step; collects diagnostics.
  FailureOr<PipelineProgram> split() {
    ScopedDiagnosticHandler handler(&context_, [&](Diagnostic &diagnostic) {
      errors_ += diagnostic.str() + "\n";
      return success();
    });
    FailureOr<PipelineProgram> program =
        splitPipeline(step_, PipelineConfig());
    if (failed(program) || failed(schedulePipeline(step_, *program)) ||
        failed(verifyPipelineProgram(step_, *program)))
      return failure();
    return program;
  }

  /// The schedule of `rank` by action names.
  static std::vector<std::string> scheduleOf(const PipelineProgram &program,
                                             int64_t rank) {
    std::vector<std::string> names;
    for (const ScheduledAction &entry : program.schedule[rank])
      names.push_back(program.programs[rank][entry.program].actionName(
          entry.microBatch, program.chunks));
    return names;
  }

  /// The index of `rank`'s program called `name`.
  static size_t programNamed(const PipelineProgram &program, int64_t rank,
                             const std::string &name) {
    for (size_t i = 0; i < program.programs[rank].size(); ++i)
      if (program.programs[rank][i].name() == name)
        return i;
    ADD_FAILURE() << "no program " << name << " on rank " << rank;
    return 0;
  }

  MLIRContext context_;
  OwningOpRef<ModuleOp> module_;
  func::FuncOp step_;
  std::string errors_;
};

TEST_F(PipelineSplitTest, SendsBoundariesAndSharesTheTiedWeight) {
  FailureOr<PipelineProgram> program = split();
  ASSERT_TRUE(succeeded(program)) << errors_;
  ASSERT_EQ(program->ranks(), 2);
  // Arguments: we (both ends), w0 (stage 0), w1 (stage 1), x (stage 0, the
  // embedding reads it; one micro-batch's).
  EXPECT_EQ(program->argumentRanks,
            (std::vector<std::vector<int64_t>>{{0, 1}, {0}, {1}, {0}}));
  // The loss on stage 0; each update where its parameter is.
  EXPECT_EQ(program->resultRanks,
            (std::vector<std::vector<int64_t>>{{0}, {0, 1}, {0}, {1}}));
  // Per micro-batch: the activation and its gradient. Per step: the loss
  // total, and the two partial totals of the tied weight, one each way.
  int64_t perMicroBatch[2] = {0, 0}, perStep[2] = {0, 0};
  for (const StageTransfer &transfer : program->transfers)
    ++(transfer.perMicroBatch ? perMicroBatch : perStep)[transfer.from];
  EXPECT_EQ(perMicroBatch[0], 1);
  EXPECT_EQ(perMicroBatch[1], 1);
  EXPECT_EQ(perStep[0], 1);
  EXPECT_EQ(perStep[1], 2);
  // Every transfer has its own channel.
  std::set<int64_t> channels;
  for (const StageTransfer &transfer : program->transfers)
    EXPECT_TRUE(channels.insert(transfer.channel).second);
  // 1F1B: one forward of warm-up on stage 0, the gradient's receive posted
  // before each backward; stage 1 receives each activation first.
  EXPECT_EQ(scheduleOf(*program, 0),
            (std::vector<std::string>{"F0", "F1", "RB0", "B0", "RB1", "B1",
                                      "step"}));
  EXPECT_EQ(
      scheduleOf(*program, 1),
      (std::vector<std::string>{"RF0", "F0", "B0", "RF1", "F1", "B1", "step"}));
}

TEST_F(PipelineSplitTest, ProgramsDoNotGrowWithMicroBatches) {
  FailureOr<PipelineProgram> two = split();
  ASSERT_TRUE(succeeded(two)) << errors_;
  std::vector<std::vector<size_t>> sizes;
  for (const std::vector<ActionProgram> &programs : two->programs) {
    sizes.emplace_back();
    for (const ActionProgram &program : programs)
      sizes.back().push_back(program.items.size());
  }
  size_t transfers = two->transfers.size();
  buildStep(16);
  FailureOr<PipelineProgram> sixteen = split();
  ASSERT_TRUE(succeeded(sixteen)) << errors_;
  for (auto [rank, programs] : llvm::enumerate(sixteen->programs))
    for (auto [index, program] : llvm::enumerate(programs))
      EXPECT_EQ(program.items.size(), sizes[rank][index]);
  EXPECT_EQ(sixteen->transfers.size(), transfers);
  // Only the schedules grow: each action once per micro-batch.
  EXPECT_EQ(sixteen->schedule[0].size(), 3u * 16 + 1);
}

TEST_F(PipelineSplitTest, CheckerFindsBrokenPrograms) {
  FailureOr<PipelineProgram> program = split();
  ASSERT_TRUE(succeeded(program)) << errors_;
  ScopedDiagnosticHandler handler(&context_, [&](Diagnostic &diagnostic) {
    errors_ += diagnostic.str() + "\n";
    return success();
  });
  EXPECT_TRUE(succeeded(verifyPipelineProgram(step_, *program))) << errors_;
  // Stage 0 sends its activations only after waiting for their gradients.
  PipelineProgram late = *program;
  std::vector<StageItem> &forward =
      late.programs[0][programNamed(late, 0, "forward.c0")].items;
  auto send = llvm::find_if(forward, [](const StageItem &item) {
    return item.kind == StageItem::Kind::Send;
  });
  ASSERT_NE(send, forward.end());
  late.programs[0][programNamed(late, 0, "backward.c0")].items.push_back(*send);
  forward.erase(send);
  EXPECT_TRUE(failed(verifyPipelineProgram(step_, late)));
  EXPECT_NE(errors_.find("deadlocks the pipeline: rank 0 waits in B0 for a "
                         "value from rank 1 that is never sent before it"),
            std::string::npos)
      << errors_;
  // A send that is in no program.
  PipelineProgram unsent = *program;
  std::vector<StageItem> &backward =
      unsent.programs[1][programNamed(unsent, 1, "backward.c0")].items;
  auto gradient = llvm::find_if(backward, [](const StageItem &item) {
    return item.kind == StageItem::Kind::Send;
  });
  ASSERT_NE(gradient, backward.end());
  backward.erase(gradient);
  EXPECT_TRUE(failed(verifyPipelineProgram(step_, unsent)));
  EXPECT_NE(errors_.find("is sent 0 times and received 1 times"),
            std::string::npos)
      << errors_;
  // A schedule that skips a micro-batch's backward.
  PipelineProgram skipped = *program;
  skipped.schedule[1].erase(skipped.schedule[1].begin() + 2);
  EXPECT_TRUE(failed(verifyPipelineProgram(step_, skipped)));
  EXPECT_NE(errors_.find("the schedule of pipeline rank 1 never runs "
                         "backward.c0 for micro-batch 0"),
            std::string::npos)
      << errors_;
}

/// Each malformation of a split program is refused by the checker with
/// its own message (as a hand-edited or miscompiled program would be).
TEST_F(PipelineSplitTest, CheckerNamesEveryMalformation) {
  FailureOr<PipelineProgram> program = split();
  ASSERT_TRUE(succeeded(program)) << errors_;
  ScopedDiagnosticHandler handler(&context_, [&](Diagnostic &diagnostic) {
    errors_ += diagnostic.str() + "\n";
    return success();
  });
  auto expectRefused = [&](const PipelineProgram &broken,
                           const std::string &message) {
    errors_.clear();
    EXPECT_TRUE(failed(verifyPipelineProgram(step_, broken))) << message;
    EXPECT_NE(errors_.find(message), std::string::npos) << errors_;
  };
  auto firstSend = [](PipelineProgram &changed, int64_t rank) {
    for (ActionProgram &action : changed.programs[rank])
      for (StageItem &item : action.items)
        if (item.kind == StageItem::Kind::Send)
          return &item;
    return static_cast<StageItem *>(nullptr);
  };

  PipelineProgram fewSchedules = *program;
  fewSchedules.schedule.pop_back();
  expectRefused(fewSchedules,
                "expected a schedule for each of the 2 pipeline ranks, found 1");

  PipelineProgram fewResults = *program;
  fewResults.results.pop_back();
  expectRefused(fewResults,
                "expected the results of each of the 2 pipeline ranks, found 1");

  PipelineProgram unknownTransfer = *program;
  ASSERT_TRUE(firstSend(unknownTransfer, 0));
  firstSend(unknownTransfer, 0)->transfer = 99;
  expectRefused(unknownTransfer,
                "pipeline rank 0 names transfer 99, outside the step's " +
                    std::to_string(program->transfers.size()));

  // Rank 1 sends what rank 0 should.
  PipelineProgram wrongSender = *program;
  StageItem moved = *firstSend(wrongSender, 0);
  wrongSender.programs[1][0].items.push_back(moved);
  expectRefused(wrongSender,
                "pipeline transfer " + std::to_string(moved.transfer) +
                    " (rank 0 to rank 1) is sent by rank 1");

  // A micro-batch's activations sent by the step program.
  PipelineProgram fromStep = *program;
  StageItem send = *firstSend(fromStep, 0);
  fromStep.programs[0][programNamed(fromStep, 0, "step")].items.push_back(
      send);
  expectRefused(fromStep, "pipeline transfer " +
                              std::to_string(send.transfer) +
                              " of a micro-batch is sent by the step program "
                              "of rank 0");

  PipelineProgram unknownProgram = *program;
  unknownProgram.schedule[0][0].program = 99;
  expectRefused(unknownProgram,
                "the schedule of pipeline rank 0 runs program 99, outside its " +
                    std::to_string(program->programs[0].size()));

  PipelineProgram farMicroBatch = *program;
  farMicroBatch.schedule[0][0].microBatch = 99;
  expectRefused(farMicroBatch, "for micro-batch 99 at position 0: expected "
                               "micro-batches in [0, " +
                                   std::to_string(program->microBatches) +
                                   ") and the step program once, last");
}

TEST_F(PipelineSplitTest, DiagnosesAnOpThatRunsTooLate) {
  // Unmarking a forward op of layer 0 makes it an op of the whole step, run
  // after every micro-batch, while the micro-batch still reads it.
  auto layer0 = graph::PartAttr::getLayer(&context_, 0);
  step_.walk([&](Operation *op) {
    auto phase = op->getAttrOfType<StringAttr>("graph.phase");
    if (graph::getModelPart(op) == layer0 && phase &&
        phase.getValue() == "forward")
      op->removeAttr("graph.phase");
  });
  EXPECT_TRUE(failed(split()));
  // It would run on both stages (its users' ranks), reading the
  // embedding's output of the micro-batch in the step on stage 1.
  EXPECT_NE(errors_.find("reads a value of a micro-batch from pipeline rank 0 "
                         "on rank 1 in the step: expected it to reach the "
                         "step through graph.microbatch_sum"),
            std::string::npos)
      << errors_;
}

TEST_F(PipelineSplitTest, DiagnosesAMissingPhase) {
  step_.walk([&](Operation *op) { op->removeAttr("graph.phase"); });
  EXPECT_TRUE(failed(split()));
  EXPECT_NE(errors_.find("sums a value over micro-batches that no op of the "
                         "micro-batch makes"),
            std::string::npos)
      << errors_;
}

TEST_F(PipelineSplitTest, DiagnosesAnOpWithoutAStage) {
  step_.walk([&](Operation *op) {
    if (graph::getModelPart(op) == graph::PartAttr::getHead(&context_))
      op->removeAttr("trellis.stage");
  });
  EXPECT_TRUE(failed(split()));
  EXPECT_NE(errors_.find("expected a virtual stage (trellis.stage) in [0, "
                         "2), found none: cut the step with "
                         "trellis-assign-stages first"),
            std::string::npos)
      << errors_;
}

} // namespace
