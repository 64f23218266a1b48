//===- PlanTest.cpp - The plan loader rejects malformed plans -------------===//

#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Executor.h"

#include <gtest/gtest.h>

#include <random>

using namespace trellis::runtime;

namespace {

/// loss = sum(a @ b): two parameters, one matmul, one reduction.
const std::string kValidPlan = R"({
  "format": "trellis-plan", "version": 3, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [3, 4], "dtype": "f32"},
              {"shape": [2, 4], "dtype": "f32"}, {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones"},
                {"buffer": 1, "role": "param", "param": "b", "init": "normal:0.02"}],
  "results": [{"buffer": 3, "role": "loss"}],
  "stages": [{"stage": 0, "program": [
    {"op": "matmul", "inputs": [0, 1], "outputs": [2], "attrs": {}},
    {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1]}}
  ]}]
})";

std::string replace(std::string text, const std::string &from,
                    const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

void expectRejected(const std::string &text, const std::string &message) {
  StatusOr<Plan> plan = parsePlan(text);
  ASSERT_FALSE(plan.ok()) << "accepted a plan that should fail with: "
                          << message;
  EXPECT_NE(plan.status().message().find(message), std::string::npos)
      << "got: " << plan.status().message();
}

TEST(PlanTest, AcceptsAndRunsAValidPlan) {
  StatusOr<Plan> plan = parsePlan(kValidPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  Executor executor(std::move(*plan));
  std::fill(executor.argument(0).f32(), executor.argument(0).f32() + 6, 1.0f);
  std::fill(executor.argument(1).f32(), executor.argument(1).f32() + 12, 0.5f);
  ASSERT_TRUE(executor.run().ok());
  EXPECT_FLOAT_EQ(executor.loss(), 2 * 4 * 3 * 0.5f);
}

TEST(PlanTest, RejectsTruncatedFiles) {
  for (size_t length :
       {size_t(0), size_t(1), kValidPlan.size() / 2, kValidPlan.size() - 2})
    expectRejected(kValidPlan.substr(0, length),
                   "malformed plan: not valid JSON");
}

TEST(PlanTest, RejectsOtherFormatsAndVersions) {
  expectRejected(replace(kValidPlan, "\"version\": 3", "\"version\": 2"),
                 "unsupported plan version 2 (this runtime reads version 3)");
  expectRejected(replace(kValidPlan, "trellis-plan", "onnx"),
                 "expected \"format\": \"trellis-plan\", found \"onnx\"");
  expectRejected("[1, 2, 3]", "expected a JSON object at the top level");
}

TEST(PlanTest, RejectsOutOfRangeBufferIds) {
  expectRejected(
      replace(kValidPlan, "\"inputs\": [0, 1]", "\"inputs\": [0, 9]"),
      "instruction 0 (matmul): buffer id 9 is out of range [0, 4)");
  expectRejected(replace(kValidPlan, "\"outputs\": [3]", "\"outputs\": [-1]"),
                 "buffer id -1 is out of range [0, 4)");
  expectRejected(replace(kValidPlan, "{\"buffer\": 3, \"role\": \"loss\"}",
                         "{\"buffer\": 4, \"role\": \"loss\"}"),
                 "result 0: buffer id 4 is out of range [0, 4)");
  expectRejected(replace(kValidPlan, "{\"buffer\": 1, \"role\": \"param\"",
                         "{\"buffer\": 100, \"role\": \"param\""),
                 "argument 1: buffer id 100 is out of range [0, 4)");
}

TEST(PlanTest, RejectsShapeMismatches) {
  expectRejected(replace(kValidPlan, "{\"shape\": [2, 4], \"dtype\": \"f32\"}",
                         "{\"shape\": [2, 5], \"dtype\": \"f32\"}"),
                 "instruction 0 (matmul): expected output 0 of shape [2, 4] "
                 "(f32), found [2, 5] (f32)");
  expectRejected(replace(kValidPlan, "{\"shape\": [3, 4], \"dtype\": \"f32\"}",
                         "{\"shape\": [5, 4], \"dtype\": \"f32\"}"),
                 "contracting sizes differ: [2, 3] x [5, 4]");
  expectRejected(replace(kValidPlan, "{\"shape\": [3, 4], \"dtype\": \"f32\"}",
                         "{\"shape\": [3, 4], \"dtype\": \"i32\"}"),
                 "argument 1: parameters and optimizer states must be f32");
  expectRejected(replace(kValidPlan, "{\"shape\": [], \"dtype\": \"f32\"}",
                         "{\"shape\": [1], \"dtype\": \"f32\"}"),
                 "expected output 0 of shape [] (f32), found [1] (f32)");
}

TEST(PlanTest, RejectsMalformedBuffers) {
  expectRejected(replace(kValidPlan, "[2, 3]", "[2, -3]"),
                 "buffer 0: expected sizes >= 0, found [2,-3]");
  expectRejected(replace(kValidPlan, "[2, 3]", "[65536, 65536, 65536]"),
                 "holds more than 2^36 elements");
  expectRejected(replace(kValidPlan, "\"dtype\": \"f32\"}, {\"shape\": [3, 4]",
                         "\"dtype\": \"f64\"}, {\"shape\": [3, 4]"),
                 "buffer 0: expected dtype \"f32\" or \"i32\", found \"f64\"");
}

TEST(PlanTest, RejectsBadInstructions) {
  expectRejected(
      replace(kValidPlan, "\"op\": \"matmul\"", "\"op\": \"conv2d\""),
      "instruction 0 (conv2d): unknown op 'conv2d'");
  expectRejected(
      replace(kValidPlan, "\"attrs\": {\"dims\": [0, 1]}", "\"attrs\": {}"),
      "instruction 1 (reduce_sum): missing attribute 'dims'");
  expectRejected(replace(kValidPlan, "\"dims\": [0, 1]", "\"dims\": [1, 0]"),
                 "expected increasing reduced dimensions in [0, 2)");
  expectRejected(replace(kValidPlan, "\"inputs\": [0, 1]", "\"inputs\": [0]"),
                 "expected 2 inputs and 1 outputs, found 1 and 1");
}

TEST(PlanTest, RejectsBrokenDataflow) {
  std::string swapped = replace(kValidPlan,
                                "{\"op\": \"matmul\", \"inputs\": [0, 1], "
                                "\"outputs\": [2], \"attrs\": {}},",
                                "");
  swapped = replace(swapped, "\"attrs\": {\"dims\": [0, 1]}}",
                    "\"attrs\": {\"dims\": [0, 1]}}, {\"op\": \"matmul\", "
                    "\"inputs\": [0, 1], \"outputs\": [2], \"attrs\": {}}");
  expectRejected(swapped, "reads buffer 2 before it is written");
  expectRejected(replace(kValidPlan, "\"outputs\": [2]", "\"outputs\": [0]"),
                 "expected output 0 of shape [2, 4] (f32), found [2, 3] (f32)");
}

TEST(PlanTest, RejectsBadArgumentsAndResults) {
  expectRejected(replace(kValidPlan, "\"role\": \"param\", \"param\": \"a\"",
                         "\"role\": \"weights\", \"param\": \"a\""),
                 "argument 0: unknown role \"weights\"");
  expectRejected(
      replace(kValidPlan, "\"init\": \"ones\"", "\"init\": \"uniform\""),
      "argument 0: expected init zeros, ones or normal:<std>");
  expectRejected(replace(kValidPlan, "\"init\": \"normal:0.02\"",
                         "\"init\": \"normal:abc\""),
                 "argument 1: malformed init \"normal:abc\"");
  expectRejected(
      replace(kValidPlan, "\"role\": \"loss\"", "\"role\": \"other\""),
      "expected result 0 to be the loss");
}

TEST(PlanTest, RejectsBadMeshes) {
  expectRejected(
      replace(kValidPlan, "\"size\": 1", "\"size\": 0"),
      "mesh: expected mesh axis \"dp\" to have a size >= 1, found 0");
}

/// Random byte flips of a valid plan never crash the loader: each either
/// loads (and then validates) or is rejected with a message.
TEST(PlanTest, SurvivesRandomCorruption) {
  std::mt19937 random(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text = kValidPlan;
    int flips = 1 + random() % 4;
    for (int f = 0; f < flips; ++f)
      text[random() % text.size()] = static_cast<char>(random() % 128);
    StatusOr<Plan> plan = parsePlan(text);
    if (!plan.ok()) {
      EXPECT_FALSE(plan.status().message().empty());
      continue;
    }
    Executor executor(std::move(*plan));
    (void)executor.run();
  }
}

} // namespace

namespace {

/// kValidPlan with one more i32 [2, 3] buffer bound to an input `name`.
std::string planWithInput(const std::string &name) {
  std::string text = replace(kValidPlan, R"({"shape": [], "dtype": "f32"}])",
                             R"({"shape": [], "dtype": "f32"},
              {"shape": [2, 3], "dtype": "i32"}])");
  return replace(text, R"("init": "normal:0.02"}])",
                 R"("init": "normal:0.02"},
                {"buffer": 4, "role": "input", "param": ")" +
                     name + R"("}])");
}

TEST(PlanTest, InputsAreTokensAndTargetsOrTheirMicroBatches) {
  for (const char *name : {"tokens", "targets", "tokens.0", "targets.12"}) {
    StatusOr<Plan> plan = parsePlan(planWithInput(name));
    EXPECT_TRUE(plan.ok()) << name << ": " << plan.status().message();
  }
  for (const char *name : {"images", "tokens.", "tokens.x", "tokens.-1",
                           "tokens.1234567", "tokens0"})
    expectRejected(planWithInput(name),
                   std::string("unknown input \"") + name +
                       "\"; expected tokens or targets, or tokens.<i> and "
                       "targets.<i> per micro-batch");
}

} // namespace

namespace {

/// loss = sum(a @ b) over two stages: stage 0 holds `a` and sends it;
/// stage 1 multiplies, reduces, and sends the loss back to stage 0.
const std::string kPipelinePlan = R"({
  "format": "trellis-plan", "version": 3, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "pp", "size": 2}], "pipeline_axis": "pp",
  "buffers": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [3, 4], "dtype": "f32"},
              {"shape": [2, 4], "dtype": "f32"}, {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones", "stages": [0]},
                {"buffer": 1, "role": "param", "param": "b", "init": "ones", "stages": [1]}],
  "results": [{"buffer": 3, "role": "loss", "stages": [0]}],
  "stages": [{"stage": 0, "program": [
    {"op": "send", "inputs": [0], "outputs": [], "attrs": {"axes": ["pp"], "peer": 1, "channel": 0}},
    {"op": "recv", "inputs": [], "outputs": [3], "attrs": {"axes": ["pp"], "peer": 1, "channel": 1}}
  ]}, {"stage": 1, "program": [
    {"op": "recv", "inputs": [], "outputs": [0], "attrs": {"axes": ["pp"], "peer": 0, "channel": 0}},
    {"op": "matmul", "inputs": [0, 1], "outputs": [2], "attrs": {}},
    {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1]}},
    {"op": "send", "inputs": [3], "outputs": [], "attrs": {"axes": ["pp"], "peer": 0, "channel": 1}}
  ]}]
})";

} // namespace

TEST(PlanTest, SelectsAStageOfAPipelinePlan) {
  StatusOr<Plan> plan = parsePlan(kPipelinePlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_EQ(stageOfRank(*plan, 1), 1);
  selectStage(*plan, 1);
  EXPECT_EQ(plan->program.size(), 4u);
  EXPECT_TRUE(plan->holds(plan->arguments[1].stages));
  EXPECT_FALSE(plan->holds(plan->arguments[0].stages));
  // A stage allocates only what it touches: stage 0 never holds `b`.
  selectStage(*plan, 0);
  Executor executor(std::move(*plan));
  EXPECT_EQ(executor.argument(1).f32(), nullptr);
  EXPECT_NE(executor.argument(0).f32(), nullptr);
}

TEST(PlanTest, RejectsMalformedPipelinePlans) {
  expectRejected(replace(kPipelinePlan, "\"pipeline_axis\": \"pp\",", ""),
                 "a plan of 2 stages needs \"pipeline_axis\": the mesh axis "
                 "that numbers them");
  expectRejected(replace(kPipelinePlan, "\"pipeline_axis\": \"pp\"",
                         "\"pipeline_axis\": \"dp\""),
                 "pipeline_axis: unknown mesh axis");
  expectRejected(replace(kPipelinePlan, "[{\"name\": \"pp\", \"size\": 2}]",
                         "[{\"name\": \"pp\", \"size\": 4}]"),
                 "the pipeline axis 'pp' has size 4, the plan 2 stages");
  expectRejected(
      replace(kPipelinePlan, "\"stages\": [1]", "\"stages\": [2]"),
      "argument 1: field \"stages\": stage 2 is out of range [0, 2)");
  expectRejected(replace(kPipelinePlan, "\"role\": \"loss\", \"stages\": [0]",
                         "\"role\": \"loss\", \"stages\": [1]"),
                 "expected the loss on stage 0 alone");
  expectRejected(replace(kPipelinePlan, "{\"stage\": 1, \"program\"",
                         "{\"stage\": 0, \"program\""),
                 "stage 1: field \"stage\": expected 1, found 0");
  // Stage 1 reads `a` before receiving it.
  expectRejected(
      replace(kPipelinePlan,
              "{\"op\": \"recv\", \"inputs\": [], \"outputs\": [0], \"attrs\": "
              "{\"axes\": [\"pp\"], \"peer\": 0, \"channel\": 0}},",
              ""),
      "stage 1: instruction 0 (matmul) reads buffer 0 before it is written");
  // A send completes with a later receive from its peer, not any channel.
  expectRejected(
      replace(kPipelinePlan, "\"peer\": 1, \"channel\": 0}",
              "\"peer\": 1, \"channel\": 0, \"complete_with\": 7}"),
      "stage 0: instruction 0 (send): complete_with names channel 7, but no "
      "later recv from the same peer uses it");
  StatusOr<Plan> completed =
      parsePlan(replace(kPipelinePlan, "\"peer\": 1, \"channel\": 0}",
                        "\"peer\": 1, \"channel\": 0, \"complete_with\": 1}"));
  EXPECT_TRUE(completed.ok()) << completed.status().message();
  // Actions name runs of a stage's instructions, in order.
  std::string withActions =
      replace(kPipelinePlan, "{\"stage\": 1, \"program\"",
              "{\"stage\": 1, \"actions\": [{\"name\": \"F0\", \"first\": 0, "
              "\"count\": 4}], \"program\"");
  StatusOr<Plan> traced = parsePlan(withActions);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  selectStage(*traced, 1);
  ASSERT_EQ(traced->actions.size(), 1u);
  EXPECT_EQ(traced->actions[0].name, "F0");
  expectRejected(replace(withActions, "\"count\": 4", "\"count\": 5"),
                 "stage 1 action 0: instructions [0, +5) are not in order "
                 "after the previous action and within the 4 instructions");
  // Stage 0 never gets the loss.
  expectRejected(
      replace(kPipelinePlan,
              ",\n    {\"op\": \"recv\", \"inputs\": [], \"outputs\": [3], "
              "\"attrs\": {\"axes\": [\"pp\"], \"peer\": 1, \"channel\": 1}}",
              ""),
      "stage 0: result buffer 3 is never written");
}
