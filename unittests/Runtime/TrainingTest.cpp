//===- TrainingTest.cpp - End-to-end training on one rank -----------------===//
//
// Compiles the tiny example models in-process, trains them on the CPU
// runtime, and checks that they learn (overfit one batch) and that a saved
// and resumed run continues exactly where an uninterrupted one would be.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Frontend/ModelImporter.h"
#include "trellis/Runtime/TokenSource.h"
#include "trellis/Runtime/Trainer.h"
#include "trellis/Target/Plan/PlanEmitter.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace {

std::string readExample(const std::string &name) {
  std::ifstream file(std::string(TRELLIS_EXAMPLES_DIR) + "/configs/" + name);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

/// Compiles `config` at batch 4, seq 32 into a plan file; returns its path.
std::string compilePlan(const std::string &config, double learningRate) {
  llvm::Expected<trellis::TransformerConfig> parsed =
      trellis::parseTransformerConfig(readExample(config));
  EXPECT_TRUE(static_cast<bool>(parsed));
  mlir::MLIRContext context;
  auto module = trellis::importTransformer(context, *parsed, {4, 32});
  EXPECT_TRUE(static_cast<bool>(module));
  mlir::PassManager pm(&context);
  trellis::TrainingOptions options;
  options.learningRate = learningRate;
  trellis::buildTrainingPipeline(pm, options);
  EXPECT_TRUE(mlir::succeeded(pm.run(module->get())));
  auto step = module->get().lookupSymbol<mlir::func::FuncOp>("train_step");
  trellis::PlanMetadata metadata;
  metadata.fields["vocab_size"] = parsed->vocabSize;
  auto plan = trellis::emitPlan(step, std::move(metadata));
  EXPECT_TRUE(mlir::succeeded(plan));
  // One file per process: ctest runs the tests as processes side by side,
  // several of which compile the same config.
  std::string path = ::testing::TempDir() + std::to_string(::getpid()) + "-" +
                     config + ".plan";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *plan;
  std::ofstream(path) << text;
  return path;
}

std::unique_ptr<trellis::runtime::Trainer>
makeTrainer(const trellis::runtime::TrainOptions &options) {
  auto trainer = trellis::runtime::Trainer::create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status().message();
  return trainer.ok() ? std::move(*trainer) : nullptr;
}

std::vector<float> train(trellis::runtime::Trainer &trainer, int steps) {
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    trellis::runtime::Status status = trainer.step();
    EXPECT_TRUE(status.ok()) << status.message();
    losses.push_back(trainer.lastLoss());
  }
  return losses;
}

class TrainingTest : public ::testing::TestWithParam<const char *> {};

TEST_P(TrainingTest, OverfitsOneRepeatedBatch) {
  trellis::runtime::TrainOptions options;
  options.planPath = compilePlan(GetParam(), 3e-3);
  options.data = "repeat";
  auto trainer = makeTrainer(options);
  ASSERT_TRUE(trainer);
  std::vector<float> losses = train(*trainer, 40);
  // A fresh model predicts about uniformly: ln(256) = 5.55.
  EXPECT_NEAR(losses.front(), 5.55, 0.1);
  EXPECT_LT(losses.back(), 0.5 * losses.front())
      << "first " << losses.front() << ", last " << losses.back();
}

TEST_P(TrainingTest, SaveAndResumeMatchesUninterruptedRun) {
  trellis::runtime::TrainOptions options;
  options.planPath = compilePlan(GetParam(), 1e-3);
  options.seed = 11;
  auto straight = makeTrainer(options);
  ASSERT_TRUE(straight);
  std::vector<float> expected = train(*straight, 50);

  auto first = makeTrainer(options);
  ASSERT_TRUE(first);
  std::vector<float> losses = train(*first, 25);
  std::string dir = ::testing::TempDir() + "checkpoint-" + GetParam();
  ASSERT_TRUE(first->save(dir).ok());

  options.loadDir = dir;
  auto resumed = makeTrainer(options);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->completedSteps(), 25);
  std::vector<float> rest = train(*resumed, 25);
  losses.insert(losses.end(), rest.begin(), rest.end());
  ASSERT_EQ(losses.size(), expected.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_EQ(losses[i], expected[i]) << "step " << i + 1;
}

TEST_P(TrainingTest, RejectsACheckpointOfAnotherModel) {
  trellis::runtime::TrainOptions options;
  options.planPath = compilePlan(GetParam(), 1e-3);
  auto trainer = makeTrainer(options);
  ASSERT_TRUE(trainer);
  std::string dir = ::testing::TempDir() + "other-" + GetParam();
  ASSERT_TRUE(trainer->save(dir).ok());

  std::string other = std::string(GetParam()) == "gpt2-tiny.json"
                          ? "llama-tiny.json"
                          : "gpt2-tiny.json";
  options.planPath = compilePlan(other, 1e-3);
  options.loadDir = dir;
  auto rejected = trellis::runtime::Trainer::create(options);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(
      rejected.status().message().find("it was written for another model"),
      std::string::npos)
      << rejected.status().message();

  options.loadDir = ::testing::TempDir() + "no-such-checkpoint";
  rejected = trellis::runtime::Trainer::create(options);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find("is not a directory"),
            std::string::npos)
      << rejected.status().message();
}

// A trainer fed by its caller (the C API's sessions) takes the steps of one
// fed by the data source, bit for bit; refused batches, tensors and
// checkpoints change nothing.
TEST_P(TrainingTest, CallerBatchesEqualTheDataSource) {
  trellis::runtime::TrainOptions options;
  options.planPath = compilePlan(GetParam(), 1e-3);
  auto fed = makeTrainer(options);
  options.callerBatches = true;
  auto called = makeTrainer(options);
  ASSERT_TRUE(fed && called);
  trellis::runtime::Status noData = called->step();
  ASSERT_FALSE(noData.ok());
  EXPECT_EQ(noData.message(), "this trainer has no data source: its caller "
                              "passes each step's tokens and targets");
  trellis::runtime::StatusOr<double> noEval = called->evaluate(1);
  ASSERT_FALSE(noEval.ok());
  EXPECT_EQ(noEval.status().message(),
            "this trainer has no held-out data (--eval-data)");

  int64_t count = called->batchSize() * called->seqLength();
  std::vector<int32_t> tokens(count), targets(count);
  auto source = trellis::runtime::makeSyntheticTokens(0, called->vocabSize(),
                                                      /*repeat=*/false);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(source
                    ->fill({step, step * called->batchSize()},
                           called->batchSize(), called->seqLength(),
                           tokens.data(), targets.data())
                    .ok());
    std::vector<int32_t> wrong = targets;
    wrong[1] = -1;
    trellis::runtime::Status refused = called->step(tokens.data(), wrong.data());
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("targets[0, 1] is -1: expected a token "
                                     "id in [0, "),
              std::string::npos)
        << refused.message();
    ASSERT_TRUE(fed->step().ok());
    ASSERT_TRUE(called->step(tokens.data(), targets.data()).ok());
    EXPECT_EQ(fed->lastLoss(), called->lastLoss()) << "step " << step + 1;
  }

  // Every named tensor reads the same from both, and a write reads back.
  std::vector<std::string> names = called->tensorNames();
  ASSERT_FALSE(names.empty());
  for (const std::string &name : names) {
    std::vector<float> a, b;
    ASSERT_TRUE(fed->readTensor(name, a).ok()) << name;
    ASSERT_TRUE(called->readTensor(name, b).ok()) << name;
    EXPECT_EQ(a, b) << name;
  }
  const std::string &first = names.front();
  std::vector<float> values;
  ASSERT_TRUE(called->readTensor(first, values).ok());
  for (float &value : values)
    value += 1.0f;
  ASSERT_TRUE(called->writeTensor(first, values.data(), values.size()).ok());
  std::vector<float> back;
  ASSERT_TRUE(called->readTensor(first, back).ok());
  EXPECT_EQ(back, values);
  EXPECT_FALSE(called->writeTensor(first, values.data(), 3).ok());

  // A checkpoint of another model is refused whole: the state is unchanged.
  std::string other = std::string(GetParam()) == "gpt2-tiny.json"
                          ? "llama-tiny.json"
                          : "gpt2-tiny.json";
  trellis::runtime::TrainOptions otherOptions;
  otherOptions.planPath = compilePlan(other, 1e-3);
  auto stranger = makeTrainer(otherOptions);
  ASSERT_TRUE(stranger);
  std::string dir = ::testing::TempDir() + "stranger-" + GetParam();
  ASSERT_TRUE(stranger->save(dir).ok());
  EXPECT_FALSE(called->load(dir).ok());
  ASSERT_TRUE(called->readTensor(first, back).ok());
  EXPECT_EQ(back, values);
  EXPECT_EQ(called->completedSteps(), 3);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, TrainingTest,
                         ::testing::Values("gpt2-tiny.json", "llama-tiny.json"),
                         [](const auto &info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('-'));
                         });

} // namespace
