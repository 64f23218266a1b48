//===- PlanTest.cpp - The plan loader rejects malformed plans -------------===//

#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Trainer.h"

#include "Runtime/TestPlans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

using namespace trellis::runtime;
using trellis::MetricSummary;
using trellis::summarizeMetric;
using trellis::runtime::testplans::kMicroBatchPlan;

namespace {

/// loss = sum(a @ b): two parameters, one matmul, one reduction.
const std::string kValidPlan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [3, 4], "dtype": "f32"},
              {"shape": [2, 4], "dtype": "f32"}, {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones"},
                {"buffer": 1, "role": "param", "param": "b", "init": "normal:0.02"}],
  "results": [{"buffer": 3, "role": "loss"}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "matmul", "inputs": [0, 1], "outputs": [2], "attrs": {}},
    {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1]}}
  ]}], "schedule": ["step"]}]
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

/// An executor of `plan` on the CPU backend, whose memory the test may
/// read and write directly.
std::unique_ptr<Executor> cpuExecutor(Plan plan) {
  static std::unique_ptr<Device> device =
      std::move(*(*findBackend("cpu"))->createDevice({}));
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(plan), *device);
  EXPECT_TRUE(executor.ok()) << executor.status().message();
  return executor.ok() ? std::move(*executor) : nullptr;
}

TEST(PlanTest, AcceptsAndRunsAValidPlan) {
  StatusOr<Plan> plan = parsePlan(kValidPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*plan));
  std::fill(executor->argument(0).f32(), executor->argument(0).f32() + 6, 1.0f);
  std::fill(executor->argument(1).f32(), executor->argument(1).f32() + 12, 0.5f);
  ASSERT_TRUE(executor->run().ok());
  EXPECT_FLOAT_EQ(*executor->loss(), 2 * 4 * 3 * 0.5f);
}

TEST(PlanTest, RejectsTruncatedFiles) {
  for (size_t length :
       {size_t(0), size_t(1), kValidPlan.size() / 2, kValidPlan.size() - 2})
    expectRejected(kValidPlan.substr(0, length),
                   "malformed plan: not valid JSON");
}

TEST(PlanTest, RejectsOtherFormatsAndVersions) {
  expectRejected(replace(kValidPlan, "\"version\": 4", "\"version\": 3"),
                 "unsupported plan version 3 (this runtime reads version 4)");
  expectRejected(replace(kValidPlan, "trellis-plan", "onnx"),
                 "expected \"format\": \"trellis-plan\", found \"onnx\"");
  expectRejected("[1, 2, 3]", "expected a JSON object at the top level");
  // Fields of another JSON type are errors, not exceptions.
  expectRejected(replace(kValidPlan, "\"trellis-plan\"", "3"),
                 "expected \"format\": \"trellis-plan\", found 3");
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
                 "instruction 0 (matmul): contracting sizes differ: lhs [2, 3] has 3, "
                 "rhs [5, 4] has 5");
  expectRejected(replace(kValidPlan, "{\"shape\": [3, 4], \"dtype\": \"f32\"}",
                         "{\"shape\": [3, 4], \"dtype\": \"i32\"}"),
                 "argument 1: a parameter must be an f32, bf16 or f16 buffer");
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
                 "buffer 0: expected dtype \"f32\", \"bf16\", \"f16\" or "
                 "\"i32\", found \"f64\"");
}

/// loss = sum(bf16(a)) in bf16, cast to f32; SGD updates a from the f32
/// copy of the bf16 gradient-like value.
const std::string kMixedPlan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [2, 3], "dtype": "bf16"},
              {"shape": [], "dtype": "bf16"}, {"shape": [], "dtype": "f32"},
              {"shape": [2, 3], "dtype": "f32"}, {"shape": [2, 3], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones"}],
  "results": [{"buffer": 3, "role": "loss"}, {"buffer": 5, "updates": 0}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "cast", "inputs": [0], "outputs": [1], "attrs": {"to": "bf16"}},
    {"op": "reduce_sum", "inputs": [1], "outputs": [2], "attrs": {"dims": [0, 1]}},
    {"op": "cast", "inputs": [2], "outputs": [3], "attrs": {"to": "f32"}},
    {"op": "cast", "inputs": [1], "outputs": [4], "attrs": {"to": "f32"}},
    {"op": "sgd", "inputs": [0, 4], "outputs": [5],
     "attrs": {"learning_rate": 0.5, "weight_decay": 0.0}}
  ]}], "schedule": ["step"]}]
})";

TEST(PlanTest, RunsBf16Values) {
  StatusOr<Plan> plan = parsePlan(kMixedPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*plan));
  std::fill(executor->argument(0).f32(), executor->argument(0).f32() + 6,
            1.5f);
  ASSERT_TRUE(executor->run().ok());
  EXPECT_FLOAT_EQ(*executor->loss(), 9.0f);
  ASSERT_TRUE(executor->commitUpdates().ok());
  EXPECT_FLOAT_EQ(executor->argument(0).f32()[0], 1.5f - 0.5f * 1.5f);
}

const std::string kBf16ParamPlan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [2], "dtype": "bf16"}, {"shape": [2], "dtype": "f32"},
              {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones"},
                {"buffer": 1, "role": "master", "param": "a", "init": "ones"}],
  "results": [{"buffer": 2, "role": "loss"}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "reduce_sum", "inputs": [1], "outputs": [2], "attrs": {"dims": [0]}}
  ]}], "schedule": ["step"]}]
})";

TEST(PlanTest, ConvertsArgumentValuesToTheirDtype) {
  // A bf16 parameter and its f32 master: values written as f32 round to
  // bf16 (to nearest, ties to even) and read back converted.
  StatusOr<Plan> plan = parsePlan(kBf16ParamPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*plan));
  const float written[2] = {1.00390625f, -3.0f};
  ASSERT_TRUE(executor->writeArgumentValues(0, written).ok());
  ASSERT_TRUE(executor->writeArgumentValues(1, written).ok());
  float read[2] = {0, 0};
  ASSERT_TRUE(executor->readArgumentValues(0, read).ok());
  EXPECT_EQ(read[0], 1.0f);
  EXPECT_EQ(read[1], -3.0f);
  ASSERT_TRUE(executor->readArgumentValues(1, read).ok());
  EXPECT_EQ(read[0], 1.00390625f);
  ASSERT_TRUE(executor->run().ok());
  EXPECT_FLOAT_EQ(*executor->loss(), 1.00390625f - 3.0f);
  ASSERT_TRUE(executor->readResultValues(0, read).ok());
  EXPECT_FLOAT_EQ(read[0], 1.00390625f - 3.0f);
}

TEST(PlanTest, ReadsTheGlobalShapeOfPaddedPieces) {
  // Parameter a: 3 rows over dp = 2, pieces of 2 rows (the last padded).
  std::string padded = replace(
      replace(kValidPlan, "\"mesh\": [{\"name\": \"dp\", \"size\": 1}]",
              "\"mesh\": [{\"name\": \"dp\", \"size\": 2}]"),
      "\"param\": \"a\", \"init\": \"ones\"",
      "\"param\": \"a\", \"init\": \"ones\", \"sharding\": [[\"dp\"], []], "
      "\"global_shape\": [3, 3]");
  StatusOr<Plan> plan = parsePlan(padded);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->arguments[0].globalShape, (std::vector<int64_t>{3, 3}));
  expectRejected(replace(padded, "[3, 3]", "[5, 3]"),
                 "argument 0: field \"global_shape\": dimension 0 of size 5 "
                 "split in 2 gives pieces of 3, the buffer has 2");
  expectRejected(replace(padded, "[3, 3]", "[3]"),
                 "argument 0: field \"global_shape\": expected 2 sizes, "
                 "found [3]");
}

TEST(PlanTest, RejectsADtypeAnOpDoesNotAccept) {
  // A result's dtype follows the operands' (a matmul of f32 values is f32).
  std::string bf16 = replace(kValidPlan, "{\"shape\": [2, 4], \"dtype\": \"f32\"}",
                             "{\"shape\": [2, 4], \"dtype\": \"bf16\"}");
  expectRejected(bf16, "instruction 0 (matmul): expected output 0 of shape "
                       "[2, 4] (f32), found [2, 4] (bf16)");
  std::string f16 = replace(kValidPlan, "{\"shape\": [2, 4], \"dtype\": \"f32\"}",
                            "{\"shape\": [2, 4], \"dtype\": \"f16\"}");
  expectRejected(f16, "instruction 0 (matmul): expected output 0 of shape "
                      "[2, 4] (f32), found [2, 4] (f16)");
  // Master weights, optimizer states and their gradients are f32.
  expectRejected(
      replace(replace(kValidPlan, "{\"shape\": [2, 3], \"dtype\": \"f32\"}",
                      "{\"shape\": [2, 3], \"dtype\": \"bf16\"}"),
              "\"role\": \"param\", \"param\": \"a\"",
              "\"role\": \"master\", \"param\": \"a\""),
      "argument 0: optimizer states, master weights and states must be f32 "
      "buffers");
  expectRejected(replace(kMixedPlan, "\"inputs\": [0, 4]", "\"inputs\": [0, 1]"),
                 "step instruction 4 (sgd): expected grad of element type f32, "
                 "found bf16");
  // Casts go between float dtypes; an op's float operands agree.
  expectRejected(replace(kMixedPlan, "\"to\": \"bf16\"", "\"to\": \"i32\""),
                 "instruction 0 (cast): expected a cast to f32, bf16 or f16, "
                 "found 'i32'");
}

TEST(PlanTest, RejectsBadInstructions) {
  expectRejected(
      replace(kValidPlan, "\"op\": \"matmul\"", "\"op\": \"conv2d\""),
      "instruction 0 (conv2d): unknown op 'conv2d'");
  expectRejected(
      replace(kValidPlan, "\"attrs\": {\"dims\": [0, 1]}", "\"attrs\": {}"),
      "instruction 1 (reduce_sum): missing attribute 'dims'");
  expectRejected(replace(kValidPlan, "\"attrs\": {}",
                         "\"attrs\": {\"transpose_rsh\": true}"),
                 "instruction 0 (matmul): unknown attribute 'transpose_rsh' "
                 "(matmul takes transpose_lhs, transpose_rhs, f32_result)");
  expectRejected(replace(kValidPlan, "\"dims\": [0, 1]", "\"dims\": [1, 0]"),
                 "instruction 1 (reduce_sum): expected strictly increasing "
                 "dimensions, found [1, 0]");
  expectRejected(replace(kValidPlan, "\"inputs\": [0, 1]", "\"inputs\": [0]"),
                 "expected 2 inputs and 1 outputs, found 1 and 1");
}

// Attention's optional operands (ALiBi's slopes, sinks) are named by the
// instruction's operandSegmentSizes; the sinks ask for a fourth gradient.
TEST(PlanTest, RejectsAttentionWithoutItsSegmentsOrSinksGradient) {
  const std::string plan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [1, 2, 2, 4], "dtype": "f32"}, {"shape": [2], "dtype": "f32"},
              {"shape": [1, 2, 2, 4], "dtype": "f32"}, {"shape": [1, 2, 2, 4], "dtype": "f32"},
              {"shape": [1, 2, 2, 4], "dtype": "f32"}, {"shape": [2], "dtype": "f32"},
              {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "q", "init": "ones"},
                {"buffer": 1, "role": "param", "param": "sinks", "init": "ones"}],
  "results": [{"buffer": 6, "role": "loss"}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "attention_grad", "inputs": [0, 0, 0, 0, 1], "outputs": [2, 3, 4, 5],
     "attrs": {"scale": 0.5, "operandSegmentSizes": [1, 1, 1, 1, 0, 1]}},
    {"op": "reduce_sum", "inputs": [5], "outputs": [6], "attrs": {"dims": [0]}}
  ]}], "schedule": ["step"]}]
})";
  StatusOr<Plan> accepted = parsePlan(plan);
  EXPECT_TRUE(accepted.ok()) << accepted.status().message();
  expectRejected(
      replace(plan, "\"outputs\": [2, 3, 4, 5]", "\"outputs\": [2, 3, 4]"),
      "instruction 0 (attention_grad): expected 4 outputs for these "
      "operands, found 3");
  expectRejected(
      replace(plan, ", \"operandSegmentSizes\": [1, 1, 1, 1, 0, 1]", ""),
      "expected operandSegmentSizes saying which of slopes and "
      "sinks the 1 operand(s) after the first 4 are");
  expectRejected(replace(plan, "[1, 1, 1, 1, 0, 1]", "[1, 1, 1, 1, 1, 1]"),
                 "expected operandSegmentSizes of 6 entries: 4 ones, then 0 or "
                 "1 for slopes and for sinks, summing to the 5 operands");
}

TEST(PlanTest, RejectsBrokenDataflow) {
  std::string swapped = replace(kValidPlan,
                                "{\"op\": \"matmul\", \"inputs\": [0, 1], "
                                "\"outputs\": [2], \"attrs\": {}},",
                                "");
  swapped = replace(swapped, "\"attrs\": {\"dims\": [0, 1]}}",
                    "\"attrs\": {\"dims\": [0, 1]}}, {\"op\": \"matmul\", "
                    "\"inputs\": [0, 1], \"outputs\": [2], \"attrs\": {}}");
  expectRejected(swapped, "action step instruction 0 (reduce_sum) reads "
                          "buffer 2 before it is written");
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
  expectRejected(replace(kValidPlan, "\"role\": \"loss\"", "\"role\": 7"),
                 "result 0: field \"role\": expected a string (\"loss\" or "
                 "another result's role), found 7");
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
    std::unique_ptr<Executor> executor = cpuExecutor(std::move(*plan));
    (void)executor->run();
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

TEST(PlanTest, InputsAreTokensAndTargets) {
  for (const char *name : {"tokens", "targets"}) {
    StatusOr<Plan> plan = parsePlan(planWithInput(name));
    EXPECT_TRUE(plan.ok()) << name << ": " << plan.status().message();
  }
  for (const char *name : {"images", "tokens.0", "targets.12", "tokens0"})
    expectRejected(planWithInput(name),
                   std::string("unknown input \"") + name +
                       "\"; expected tokens or targets");
  // With several micro-batches an input holds one of them, and each
  // micro-batch gets its own: tokens.0, tokens.1.
  std::string twoMicroBatches =
      replace(planWithInput("tokens"), "\"version\": 4,",
              "\"version\": 4, \"micro_batches\": 2,");
  expectRejected(twoMicroBatches, "argument 2: an input holds one "
                                  "micro-batch: expected its buffer marked "
                                  "micro_batch");
  StatusOr<Plan> marked = parsePlan(
      replace(twoMicroBatches, R"({"shape": [2, 3], "dtype": "i32"})",
              R"({"shape": [2, 3], "dtype": "i32", "micro_batch": true})"));
  ASSERT_TRUE(marked.ok()) << marked.status().message();
  EXPECT_EQ(marked->findArgument(ArgumentRole::Input, "tokens.0"), 2);
  EXPECT_EQ(marked->findArgument(ArgumentRole::Input, "tokens.1"), 3);
  EXPECT_NE(marked->arguments[2].buffer, marked->arguments[3].buffer);
}

} // namespace

namespace {

/// Two micro-batches over two stages: stage 0 scales `a` and sends it per
/// micro-batch; stage 1 multiplies, reduces, adds each micro-batch's loss
/// to the step's total, and sends the total to stage 0.
const std::string kPipelinePlan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "pp", "size": 2}], "pipeline_axis": "pp", "micro_batches": 2,
  "buffers": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [3, 4], "dtype": "f32"},
              {"shape": [2, 4], "dtype": "f32", "micro_batch": true},
              {"shape": [], "dtype": "f32", "micro_batch": true},
              {"shape": [], "dtype": "f32"},
              {"shape": [2, 3], "dtype": "f32", "micro_batch": true}],
  "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones", "stages": [0]},
                {"buffer": 1, "role": "param", "param": "b", "init": "ones", "stages": [1]}],
  "results": [{"buffer": 4, "role": "loss", "stages": [0]}],
  "stages": [{"stage": 0, "programs": [
    {"name": "forward.c0", "program": [
      {"op": "scale", "inputs": [0], "outputs": [5], "attrs": {"factor": 2.0}},
      {"op": "send", "inputs": [5], "outputs": [], "attrs": {"axes": ["pp"], "peer": 1, "channel": 0}}]},
    {"name": "step", "program": [
      {"op": "recv", "inputs": [], "outputs": [4], "attrs": {"axes": ["pp"], "peer": 1, "channel": 1}}]}],
    "schedule": ["F0", "F1", "step"]},
   {"stage": 1, "programs": [
    {"name": "forward_receive.c0", "program": [
      {"op": "recv", "inputs": [], "outputs": [5], "attrs": {"axes": ["pp"], "peer": 0, "channel": 0}}]},
    {"name": "forward.c0", "program": [
      {"op": "matmul", "inputs": [5, 1], "outputs": [2], "attrs": {}},
      {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1]}},
      {"op": "accumulate", "inputs": [3], "outputs": [4]}]},
    {"name": "step", "program": [
      {"op": "send", "inputs": [4], "outputs": [], "attrs": {"axes": ["pp"], "peer": 0, "channel": 1}}]}],
    "schedule": ["RF0", "F0", "RF1", "F1", "step"]}]
})";

/// One field of kValidPlan changed: (from, to, the message expected).
struct FieldCase {
  const char *from, *to, *message;
};

TEST(PlanTest, RejectsEveryMalformedField) {
  const FieldCase cases[] = {
      // Buffers.
      {R"("shape": [2, 3], "dtype": "f32"})",
       R"("shape": [1, 1, 1, 1, 1, 1, 1, 1, 1], "dtype": "f32"})",
       "buffer 0: expected rank <= 8, found 9"},
      {R"("shape": [2, 3], "dtype": "f32"})",
       R"("shape": [1000000, 1000000], "dtype": "f32"})",
       "buffer 0: [1000000,1000000] holds more than 2^36 elements"},
      {R"("shape": [2, 3], "dtype": "f32"})",
       R"("shape": [2, 3], "dtype": "f32", "micro_batch": 1})",
       "buffer 0: field \"micro_batch\": expected true or false, found 1"},
      // Arguments.
      {R"("role": "param", "param": "a")", R"("role": "weights", "param": "a")",
       "argument 0: unknown role \"weights\"; expected param, input, adam_m, "
       "adam_v, master, step, loss_scale or state"},
      {R"("param": "a")", R"("param": 5)",
       "argument 0: field \"param\": expected a name"},
      {R"("init": "ones")", R"("init": 5)",
       "argument 0: field \"init\": expected a string"},
      {R"("param": "a", )", "", "argument 0: a parameter needs a name"},
      {R"("init": "ones")", R"("init": "ones", "sharding": [["dp"]])",
       "argument 0: expected \"sharding\" to list the axes of each of the 2 "
       "dimensions"},
      {R"("init": "ones")", R"("init": "ones", "sharding": [["dp"], "x"])",
       "argument 0: malformed sharding [[\"dp\"],\"x\"]"},
      {R"("init": "ones")", R"("init": "ones", "sharding": [["dp"], [3]])",
       "argument 0: malformed sharding"},
      {R"("init": "ones")", R"("init": "ones", "sharding": [["dp"], ["dp"]])",
       "argument 0: a mesh axis splits two dimensions"},
      {R"("init": "ones")", R"("init": "ones", "global_shape": ["x", 3])",
       "argument 0: field \"global_shape\": malformed size \"x\""},
      {R"("init": "ones")",
       R"("init": "ones", "global_shape": [2, 60000000000])",
       "argument 0: field \"global_shape\": more than 2^36 elements"},
      {R"("init": "ones")", R"("init": "ones", "file_shape": "x")",
       "argument 0: malformed file_shape"},
      {R"("init": "ones")", R"("init": "ones", "file_shape": [7])",
       "argument 0: file_shape [7] holds 7 elements, the tensor 6"},
      {R"("init": "ones")", R"("init": "ones", "stages": [])",
       "argument 0: field \"stages\": expected a non-empty array of stage "
       "indices"},
      {R"("role": "param", "param": "a", "init": "ones")",
       R"("role": "input", "param": "tokens")",
       "argument 0: an input must be an i32 buffer"},
      {R"("role": "param", "param": "a", "init": "ones")", R"("role": "step")",
       "argument 0: the step must be a scalar f32 buffer"},
      {R"("role": "param", "param": "a", "init": "ones")",
       R"("role": "loss_scale")",
       "argument 0: the loss scale must be a scalar f32 buffer"},
      {R"({"buffer": 1, "role": "param", "param": "b")",
       R"({"buffer": 0, "role": "param", "param": "b")",
       "buffer 0 is bound to two arguments"},
      // Instructions and their attributes.
      {R"("attrs": {"dims": [0, 1]})", R"("attrs": {"dims": [0, "x"]})",
       "instruction 1 (reduce_sum) attribute dims: expected an array of "
       "numbers, found [0,\"x\"]"},
      {R"("attrs": {"dims": [0, 1]})", R"("attrs": {"dims": {"a": 1}})",
       "instruction 1 (reduce_sum) attribute dims: unsupported attribute "
       "value {\"a\":1}"},
      {R"("outputs": [2], "attrs": {})", R"("outputs": [2], "attrs": 5)",
       "instruction 0 (matmul): field \"attrs\": expected an object"},
      {R"("attrs": {"dims": [0, 1]}})",
       R"("attrs": {"dims": [0, 1]}}, {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1]}})",
       "action step instruction 2 (reduce_sum) writes buffer 3, which is "
       "already defined"},
      {R"("attrs": {"dims": [0, 1]}})",
       R"("attrs": {"dims": [0, 1]}}, {"op": "accumulate", "inputs": [3], "outputs": [3]})",
       "instruction 2 (accumulate): accumulate adds a micro-batch's value to "
       "the step's: expected it in a program of the micro-batch"},
      // Programs and the schedule.
      {R"(]}], "schedule": ["step"])",
       R"(]}, {"name": "step", "program": []}], "schedule": ["step"])",
       "program 1: a second program \"step\""},
      {R"("schedule": ["step"])", R"("schedule": [5])",
       "schedule entry 0: expected an action name, found 5"},
      // Results.
      {R"([{"buffer": 3, "role": "loss"}])",
       R"([{"buffer": 2, "role": "loss"}])",
       "expected the loss to be a scalar f32 buffer"},
      {R"([{"buffer": 3, "role": "loss"}])",
       R"([{"buffer": 3, "role": "loss"}, {"buffer": 2, "updates": 0}])",
       "result 1: its buffer does not match the shape of argument 0"},
  };
  for (const FieldCase &field : cases) {
    SCOPED_TRACE(field.message);
    expectRejected(replace(kValidPlan, field.from, field.to), field.message);
  }
  // No stage at all.
  std::string stageless =
      kValidPlan.substr(0, kValidPlan.find("\"stages\": [{")) +
      "\"stages\": []}";
  expectRejected(stageless, "expected at least one stage, found none");
}

TEST(PlanTest, RejectsMalformedSequenceChunks) {
  // A tokens input of [2, 4] whose sequence is stored in chunks.
  auto withTokens = [](const std::string &shape, const std::string &chunks) {
    std::string text = replace(
        kValidPlan, R"({"shape": [], "dtype": "f32"}])",
        R"({"shape": [], "dtype": "f32"}, {"shape": )" + shape +
            R"(, "dtype": "i32"}])");
    return replace(text, R"("init": "normal:0.02"})",
                   R"("init": "normal:0.02"}, {"buffer": 4, "role": "input", "param": "tokens", "sequence_chunks": )" +
                       chunks + "}");
  };
  ASSERT_TRUE(parsePlan(withTokens("[2, 4]", "2")).ok());
  expectRejected(withTokens("[2, 4]", "1"),
                 "argument 2: field \"sequence_chunks\": expected an integer "
                 ">= 2, found 1");
  expectRejected(withTokens("[2, 4]", "3"),
                 "argument 2: field \"sequence_chunks\": 3 chunks do not "
                 "divide the sequence of 4");
  expectRejected(withTokens("[8]", "2"),
                 "argument 2: field \"sequence_chunks\": expected an input of "
                 "rank >= 2 (dimension 1 the sequence), found shape [8]");
}

TEST(PlanTest, ReadsTheMetricsTheirReportsAndRejectsOthers) {
  auto withMetric = [](const std::string &metric, int64_t buffer,
                       const std::string &report = "") {
    return replace(kValidPlan, R"([{"buffer": 3, "role": "loss"}])",
                   R"([{"buffer": 3, "role": "loss"}, {"buffer": )" +
                       std::to_string(buffer) + R"(, "metric": )" + metric +
                       (report.empty() ? "" : R"(, "report": )" + report) +
                       "}]");
  };
  // Any name: a metric is what its pass declares.
  StatusOr<Plan> plan = parsePlan(withMetric(
      R"("grad_norm")", 3, R"({"label": "grad norm", "summary": "value"})"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->results[1].metric, "grad_norm");
  ASSERT_TRUE(plan->results[1].report);
  EXPECT_EQ(plan->results[1].report->label, "grad norm");
  EXPECT_EQ(plan->results[1].report->summary, MetricSummary::Value);
  EXPECT_EQ(plan->updateGuardResult(), -1);
  plan = parsePlan(
      withMetric(R"("router_entropy")", 2,
                 R"({"label": "router load", "summary": "max_over_mean"})"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->results[1].report->summary, MetricSummary::MaxOverMean);
  plan = parsePlan(withMetric(R"("update_guard")", 3));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->updateGuardResult(), 1);
  EXPECT_FALSE(plan->results[1].report);
  expectRejected(
      replace(kValidPlan, R"([{"buffer": 3, "role": "loss"}])",
              R"([{"buffer": 3, "role": "loss"}, {"buffer": 3, "report": )"
              R"({"label": "l", "summary": "value"}}])"),
      "result 1: field \"report\": expected a \"metric\" to report");
  expectRejected(withMetric("7", 3),
                 "result 1: field \"metric\": expected a metric's name, "
                 "found 7");
  expectRejected(withMetric(R"("update_guard")", 2),
                 "result 1: the update_guard metric must be an f32 scalar");
  expectRejected(
      withMetric(R"("grad_norm")", 2,
                 R"({"label": "grad norm", "summary": "value"})"),
      "result 1: the grad_norm metric's value summary reads an f32 scalar");
  expectRejected(
      withMetric(R"("expert_load")", 3,
                 R"({"label": "load", "summary": "max_over_mean"})"),
      "result 1: the expert_load metric's max_over_mean summary reads f32 "
      "[rows, columns]");
  expectRejected(
      withMetric(R"("grad_norm")", 3, R"({"label": "n", "summary": "mean"})"),
      "result 1: field \"report\": expected the summary \"value\" or "
      "\"max_over_mean\", found \"mean\"");
  expectRejected(withMetric(R"("grad_norm")", 3, R"({"summary": "value"})"),
                 "result 1: field \"report\": expected {\"label\": TEXT, "
                 "\"summary\": \"value\" or \"max_over_mean\"}, found "
                 "{\"summary\":\"value\"}");
}

TEST(PlanTest, SummarizesMetricsAsDeclared) {
  EXPECT_EQ(summarizeMetric(MetricSummary::Value, {}, {2.5f}), 2.5);
  // The worst row's max over mean; a row of no counts is left out.
  EXPECT_EQ(
      summarizeMetric(MetricSummary::MaxOverMean, {3, 2}, {1, 3, 0, 0, 2, 2}),
      1.5);
  EXPECT_EQ(summarizeMetric(MetricSummary::MaxOverMean, {1, 2}, {0, 0}), 0);
  EXPECT_FALSE(summarizeMetric(MetricSummary::MaxOverMean, {2}, {1, 2}));
}

TEST(PlanTest, RejectsAResultMadeOnOtherStagesThanItsArgument) {
  expectRejected(
      replace(kPipelinePlan, R"([{"buffer": 4, "role": "loss", "stages": [0]}])",
              R"([{"buffer": 4, "role": "loss", "stages": [0]}, {"buffer": 0, "updates": 0, "stages": [1]}])"),
      "result 1: it updates argument 0 but is produced on other stages than "
      "hold it");
}

TEST(PlanTest, RejectsTheRetiredCompletionAttribute) {
  // Sends complete where the stages' timelines prove their peer received
  // them; a plan that names a completion channel is from an older compiler.
  expectRejected(replace(kPipelinePlan, "\"peer\": 1, \"channel\": 0}",
                         "\"peer\": 1, \"channel\": 0, \"complete_with\": 1}"),
                 "stage 0: forward.c0 instruction 1 (send): unknown attribute "
                 "'complete_with' (send takes ");
}

TEST(PlanTest, RejectsTransfersThatDoNotMatch) {
  // Stage 1's step sends on a channel stage 0 does not receive.
  expectRejected(replace(kPipelinePlan,
                         "\"inputs\": [4], \"outputs\": [], \"attrs\": "
                         "{\"axes\": [\"pp\"], \"peer\": 0, \"channel\": 1}",
                         "\"inputs\": [4], \"outputs\": [], \"attrs\": "
                         "{\"axes\": [\"pp\"], \"peer\": 0, \"channel\": 0}"),
                 "stage 1 action step instruction 0 (send): sends channel 2 "
                 "to stage 0, which no stage receives");
  // It sends `b` where stage 0 receives the loss.
  expectRejected(replace(kPipelinePlan,
                         "\"inputs\": [4], \"outputs\": [], \"attrs\": "
                         "{\"axes\": [\"pp\"], \"peer\": 0",
                         "\"inputs\": [1], \"outputs\": [], \"attrs\": "
                         "{\"axes\": [\"pp\"], \"peer\": 0"),
                 "stage 1 action step instruction 0 (send): sends f32 [3, 4] "
                 "on channel 3, but stage 0 action step instruction 0 (recv) "
                 "receives it into f32 []");
  // Stage 1 receives micro-batch 1's input before micro-batch 0's.
  expectRejected(
      replace(kPipelinePlan, "\"schedule\": [\"RF0\", \"F0\", \"RF1\", \"F1\"",
              "\"schedule\": [\"RF1\", \"RF0\", \"F0\", \"F1\""),
      "stage 0 sends channel 0 to stage 1 where stage 1 receives channel 1: "
      "transfers between two stages are received in the order they are "
      "sent");
  // A stage sending to itself, and a channel sent twice.
  expectRejected(replace(kPipelinePlan, "\"peer\": 1, \"channel\": 0}",
                         "\"peer\": 0, \"channel\": 0}"),
                 "stage 0 action F0 instruction 1 (send): names its own stage "
                 "0 as its peer");
  const std::string stepSend =
      "{\"op\": \"send\", \"inputs\": [4], \"outputs\": [], \"attrs\": "
      "{\"axes\": [\"pp\"], \"peer\": 0, \"channel\": 1}}";
  expectRejected(replace(kPipelinePlan, stepSend, stepSend + ", " + stepSend),
                 "stage 1 action step instruction 1 (send): channel 3 is "
                 "already sent by stage 1 action step instruction 0 (send): "
                 "each value has a channel of its own");
  // A transfer over more than the pipeline axis.
  expectRejected(
      replace(replace(kPipelinePlan, "[{\"name\": \"pp\", \"size\": 2}]",
                      "[{\"name\": \"pp\", \"size\": 2}, {\"name\": "
                      "\"dp\", \"size\": 1}]"),
              "{\"axes\": [\"pp\"], \"peer\": 1, \"channel\": 0}",
              "{\"axes\": [\"pp\", \"dp\"], \"peer\": 1, \"channel\": 0}"),
      "stage 0 action F0 instruction 1 (send): transfers move values between "
      "pipeline stages: expected \"axes\" to be the pipeline axis alone "
      "('pp')");
}

TEST(PlanTest, RejectsMalformedChecksums) {
  EXPECT_EQ(verifyPlanChecksum("{\"checksum\":\"crc32:12").message(),
            "corrupt plan: malformed checksum field");
  EXPECT_EQ(
      verifyPlanChecksum("{\"checksum\":\"crc32:zzzzzzzz\",\"format\":1}")
          .message(),
      "corrupt plan: malformed checksum 'zzzzzzzz'");
}

/// A plan over two ranks run by one process without a communicator: its
/// collectives say how to run it instead of failing later.
TEST(PlanTest, ACollectiveWithoutPeersSaysHowToRunThePlan) {
  std::string text = replace(kValidPlan, R"({"name": "dp", "size": 1})",
                             R"({"name": "dp", "size": 2})");
  text = replace(text, R"({"shape": [], "dtype": "f32"}])",
                 R"({"shape": [], "dtype": "f32"}, {"shape": [], "dtype": "f32"}])");
  text = replace(text, R"("attrs": {"dims": [0, 1]}})",
                 R"("attrs": {"dims": [0, 1]}}, {"op": "all_reduce", "inputs": [3], "outputs": [4], "attrs": {"axes": ["dp"], "kind": "sum"}})");
  text = replace(text, R"([{"buffer": 3, "role": "loss"}])",
                 R"([{"buffer": 4, "role": "loss"}])");
  StatusOr<Plan> plan = parsePlan(text);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*plan));
  Status ran = executor->run();
  ASSERT_FALSE(ran.ok());
  EXPECT_NE(ran.message().find("all_reduce needs a communicator: run the plan "
                               "with --nproc equal to its mesh size"),
            std::string::npos)
      << ran.message();
}

/// AdamW's bias correction divides by 1 - beta^step: a step count of 0 (a
/// caller that never set it) is an error, not an infinity.
TEST(PlanTest, AdamWNeedsAStepCount) {
  const std::string plan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [4], "dtype": "f32"}, {"shape": [4], "dtype": "f32"},
              {"shape": [4], "dtype": "f32"}, {"shape": [], "dtype": "f32"},
              {"shape": [], "dtype": "f32"}, {"shape": [4], "dtype": "f32"},
              {"shape": [4], "dtype": "f32"}, {"shape": [4], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "w", "init": "ones"},
                {"buffer": 1, "role": "adam_m", "param": "w", "init": "zeros"},
                {"buffer": 2, "role": "adam_v", "param": "w", "init": "zeros"},
                {"buffer": 3, "role": "step"}],
  "results": [{"buffer": 4, "role": "loss"}, {"buffer": 5, "updates": 0},
              {"buffer": 6, "updates": 1}, {"buffer": 7, "updates": 2}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "reduce_sum", "inputs": [0], "outputs": [4], "attrs": {"dims": [0]}},
    {"op": "adamw", "inputs": [0, 0, 1, 2, 3], "outputs": [5, 6, 7],
     "attrs": {"learning_rate": 0.1, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.0}}
  ]}], "schedule": ["step"]}]
})";
  StatusOr<Plan> parsed = parsePlan(plan);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*parsed));
  Status ran = executor->run();
  ASSERT_FALSE(ran.ok());
  EXPECT_NE(ran.message().find("adamw: expected a step count >= 1, found 0"),
            std::string::npos)
      << ran.message();
}

/// A trainer in a lone process refuses a plan of several ranks, saying
/// how to run it.
TEST(PlanTest, ATrainerOfOneProcessNeedsAPlanOfOneRank) {
  std::string path = ::testing::TempDir() + "/two-ranks.plan";
  std::ofstream(path) << replace(kValidPlan, R"({"name": "dp", "size": 1})",
                                 R"({"name": "dp", "size": 2})");
  TrainOptions options;
  options.planPath = path;
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().message(),
            "the plan's mesh dp=2 has 2 ranks: run it with --nproc 2");
}

/// A plan of token lookups over two ranks' vocabulary pieces, and its
/// executor without a communicator.
std::unique_ptr<Executor> vocabularyParallelExecutor() {
  const std::string plan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 8},
  "mesh": [{"name": "tp", "size": 2}],
  "buffers": [{"shape": [4, 3], "dtype": "f32"}, {"shape": [1, 2], "dtype": "i32"},
              {"shape": [1, 2, 3], "dtype": "f32"}, {"shape": [], "dtype": "f32"},
              {"shape": [1, 2], "dtype": "i32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "table", "init": "ones", "sharding": [["tp"], []]},
                {"buffer": 1, "role": "input", "param": "tokens"},
                {"buffer": 4, "role": "input", "param": "targets"}],
  "results": [{"buffer": 3, "role": "loss"}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "embedding", "inputs": [0, 1], "outputs": [2], "attrs": {"axes": ["tp"]}},
    {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1, 2]}}
  ]}], "schedule": ["step"]}]
})";
  StatusOr<Plan> parsed = parsePlan(plan);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? cpuExecutor(std::move(*parsed)) : nullptr;
}

TEST(PlanTest, ASplitKernelWithoutPeersSaysHowToRunThePlan) {
  std::unique_ptr<Executor> executor = vocabularyParallelExecutor();
  ASSERT_TRUE(executor);
  Status ran = executor->run();
  ASSERT_FALSE(ran.ok());
  EXPECT_NE(ran.message().find("embedding is split over mesh axes: run the "
                               "plan with --nproc equal to its mesh size"),
            std::string::npos)
      << ran.message();
}

TEST(PlanTest, TokenBuffersAreNotReadAsFloats) {
  std::unique_ptr<Executor> executor = vocabularyParallelExecutor();
  ASSERT_TRUE(executor);
  std::vector<float> values(2);
  Status read = executor->readArgumentValues(1, values.data());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.message(), "expected a float buffer, found i32");
}

/// A bias-gradient-shaped sum (leading dimensions reduced) is split over
/// the threads by columns; each column still adds its rows in order, so
/// the result is the in-order double sum, bit for bit, at any thread count.
TEST(PlanTest, ColumnSumsAddTheirRowsInOrder) {
  const std::string plan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [64, 32, 40], "dtype": "f32"}, {"shape": [40], "dtype": "f32"},
              {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "x", "init": "normal:1.0"}],
  "results": [{"buffer": 2, "role": "loss"}, {"buffer": 1}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "reduce_sum", "inputs": [0], "outputs": [1], "attrs": {"dims": [0, 1]}},
    {"op": "reduce_sum", "inputs": [1], "outputs": [2], "attrs": {"dims": [0]}}
  ]}], "schedule": ["step"]}]
})";
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    DeviceOptions options;
    options.threads = threads;
    std::unique_ptr<Device> device =
        std::move(*(*findBackend("cpu"))->createDevice(options));
    StatusOr<Plan> parsed = parsePlan(plan);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    StatusOr<std::unique_ptr<Executor>> executor =
        Executor::create(std::move(*parsed), *device);
    ASSERT_TRUE(executor.ok());
    std::vector<float> x(64 * 32 * 40);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = std::sin(0.001f * static_cast<float>(i)) * 1e3f + 1e-3f;
    ASSERT_TRUE((*executor)->writeArgumentValues(0, x.data()).ok());
    ASSERT_TRUE((*executor)->run().ok());
    std::vector<float> sums(40);
    ASSERT_TRUE((*executor)->readResultValues(1, sums.data()).ok());
    for (int64_t c = 0; c < 40; ++c) {
      double expected = 0;
      for (int64_t r = 0; r < 64 * 32; ++r)
        expected += x[r * 40 + c];
      ASSERT_EQ(sums[c], static_cast<float>(expected)) << "column " << c;
    }
  }
}

/// A reshape's result shares its operand's bytes when both are
/// temporaries: a chain x -> scale -> reshape -> reshape -> sum needs one
/// 128-byte arena buffer (each instruction's result apart from its
/// operands would take two), and the sum still sees every element. A
/// reshape of an argument keeps bytes of its own: the argument outlives
/// the step.
TEST(PlanTest, ReshapesShareTheirOperandsBytes) {
  const std::string plan = R"({
  "format": "trellis-plan", "version": 4, "metadata": {"vocab_size": 4},
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [4, 8], "dtype": "f32"}, {"shape": [4, 8], "dtype": "f32"},
              {"shape": [32], "dtype": "f32"}, {"shape": [8, 4], "dtype": "f32"},
              {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "x", "init": "normal:1.0"}],
  "results": [{"buffer": 4, "role": "loss"}],
  "stages": [{"stage": 0, "programs": [{"name": "step", "program": [
    {"op": "scale", "inputs": [0], "outputs": [1], "attrs": {"factor": 2.0}},
    {"op": "reshape", "inputs": [1], "outputs": [2], "attrs": {"shape": [32]}},
    {"op": "reshape", "inputs": [2], "outputs": [3], "attrs": {"shape": [8, 4]}},
    {"op": "reduce_sum", "inputs": [3], "outputs": [4], "attrs": {"dims": [0, 1]}}
  ]}], "schedule": ["step"]}]
})";
  StatusOr<Plan> parsed = parsePlan(plan);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*parsed));
  ASSERT_TRUE(executor);
  EXPECT_EQ(executor->arenaBytes(), 128);
  std::vector<float> x(32);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.25f * static_cast<float>(i) - 3.0f;
  ASSERT_TRUE(executor->writeArgumentValues(0, x.data()).ok());
  ASSERT_TRUE(executor->run().ok());
  float loss = 0;
  ASSERT_TRUE(executor->readResultValues(0, &loss).ok());
  double expected = 0;
  for (float value : x)
    expected += 2.0 * value;
  EXPECT_EQ(loss, static_cast<float>(expected));

  // The reshape of the argument: its result and that result's reshape
  // share one buffer of their own, none of the argument's bytes.
  std::string fromArgument = replace(
      replace(plan, R"({"op": "scale", "inputs": [0], "outputs": [1], "attrs": {"factor": 2.0}},)",
              ""),
      R"({"op": "reshape", "inputs": [1], "outputs": [2],)",
      R"({"op": "reshape", "inputs": [0], "outputs": [2],)");
  parsed = parsePlan(fromArgument);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  executor = cpuExecutor(std::move(*parsed));
  ASSERT_TRUE(executor);
  EXPECT_EQ(executor->arenaBytes(), 128);
  ASSERT_TRUE(executor->writeArgumentValues(0, x.data()).ok());
  ASSERT_TRUE(executor->run().ok());
  ASSERT_TRUE(executor->readResultValues(0, &loss).ok());
  EXPECT_EQ(loss, static_cast<float>(expected / 2));
}

} // namespace

TEST(PlanTest, RunsEveryMicroBatchAndAccumulatesTheirValues) {
  StatusOr<Plan> plan = parsePlan(kMicroBatchPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  // The program is kept once; the schedule runs it once per micro-batch,
  // each run over its own buffers; the total is held for the step.
  const StageProgram &stage = plan->stageProgram();
  ASSERT_EQ(stage.programs.size(), 1u);
  EXPECT_EQ(stage.programs[0].instructions.size(), 3u);
  ASSERT_EQ(stage.schedule.size(), 3u);
  EXPECT_EQ(stage.schedule[2].name, "F2");
  EXPECT_EQ(stage.schedule[2].microBatch, 2);
  ASSERT_EQ(plan->bindings.size(), 3u);
  EXPECT_EQ(plan->bindings[0][2], 2);
  EXPECT_NE(plan->bindings[1][2], 2);
  EXPECT_NE(plan->bindings[1][2], plan->bindings[2][2]);
  EXPECT_EQ(plan->bindings[2][4], 4);
  std::vector<TimelineEntry> timeline = stageTimeline(*plan, 0);
  ASSERT_EQ(timeline.size(), 9u);
  EXPECT_NE(timeline[0].outputs[0], timeline[3].outputs[0]);
  EXPECT_EQ(timeline[3].outputs[0], plan->bindings[1][2]);
  EXPECT_EQ(timeline[2].outputs[0], 4);
  EXPECT_EQ(timeline[8].outputs[0], 4);
  // Only the first run's accumulate starts the total: the one amendment.
  EXPECT_TRUE(timeline[2].instruction->flag("first"));
  EXPECT_FALSE(timeline[5].instruction->flag("first"));
  EXPECT_EQ(stage.schedule[0].amended.size(), 1u);
  EXPECT_TRUE(stage.schedule[1].amended.empty());
  EXPECT_EQ(timeline[5].instruction, &stage.programs[0].instructions[2]);
  EXPECT_EQ(stage.liveMicroBatches, 1);
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*plan));
  std::fill(executor->argument(0).f32(), executor->argument(0).f32() + 6, 1.0f);
  std::fill(executor->argument(1).f32(), executor->argument(1).f32() + 12, 0.5f);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(executor->run().ok());
    EXPECT_FLOAT_EQ(*executor->loss(), 3 * (2 * 4 * 3 * 0.5f));
  }
}

TEST(PlanTest, SelectsAStageOfAPipelinePlan) {
  StatusOr<Plan> plan = parsePlan(kPipelinePlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_EQ(stageOfRank(*plan, 1), 1);
  selectStage(*plan, 1);
  // RF0 F0 RF1 F1 step.
  const StageProgram &stage = plan->stageProgram();
  ASSERT_EQ(stage.schedule.size(), 5u);
  EXPECT_EQ(stage.schedule[3].name, "F1");
  std::vector<TimelineEntry> timeline = stageTimeline(*plan, 1);
  ASSERT_EQ(timeline.size(), 9u);
  EXPECT_EQ(timeline[5].action, 3u);
  EXPECT_EQ(timeline[5].index, 0u);
  // Each micro-batch's transfer has its own channel; the step's come after.
  EXPECT_EQ(timeline[0].instruction->integer("channel"), 0);
  EXPECT_EQ(timeline[4].instruction->integer("channel"), 1);
  EXPECT_EQ(timeline[8].instruction->integer("channel"), 1 * 2 + 1);
  // Both receives land in their micro-batch's copy of buffer 5.
  EXPECT_EQ(timeline[0].outputs[0], 5);
  EXPECT_EQ(timeline[4].outputs[0], plan->bindings[1][5]);
  EXPECT_TRUE(plan->holds(plan->arguments[1].stages));
  EXPECT_FALSE(plan->holds(plan->arguments[0].stages));
  // A stage allocates only what it touches: stage 0 never holds `b`.
  selectStage(*plan, 0);
  std::unique_ptr<Executor> executor = cpuExecutor(std::move(*plan));
  EXPECT_EQ(executor->argument(1).f32(), nullptr);
  EXPECT_NE(executor->argument(0).f32(), nullptr);
}

TEST(PlanTest, ListsEveryRanksTransferLinks) {
  StatusOr<Plan> plan = parsePlan(kPipelinePlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::vector<TransferLink> expected = {{0, 1}, {1, 0}};
  EXPECT_EQ(transferLinks(*plan), expected);
  // With dp=2 after pp, rank 2 p + d runs stage p: each sends to the rank
  // of its data coordinate on the other stage.
  StatusOr<Plan> wide =
      parsePlan(replace(kPipelinePlan, "[{\"name\": \"pp\", \"size\": 2}]",
                        "[{\"name\": \"pp\", \"size\": 2}, {\"name\": \"dp\", "
                        "\"size\": 2}]"));
  ASSERT_TRUE(wide.ok()) << wide.status().message();
  expected = {{0, 2}, {1, 3}, {2, 0}, {3, 1}};
  EXPECT_EQ(transferLinks(*wide), expected);
  // One stage: no transfers.
  StatusOr<Plan> single = parsePlan(kValidPlan);
  ASSERT_TRUE(single.ok()) << single.status().message();
  EXPECT_TRUE(transferLinks(*single).empty());
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
  expectRejected(replace(kPipelinePlan, "{\"stage\": 1, \"programs\"",
                         "{\"stage\": 0, \"programs\""),
                 "stage 1: field \"stage\": expected 1, found 0");
  // Stage 1 reads `a` before receiving it.
  expectRejected(
      replace(kPipelinePlan, "\"schedule\": [\"RF0\", \"F0\", \"RF1\"",
              "\"schedule\": [\"F0\", \"RF0\", \"RF1\""),
      "stage 1: action F0 instruction 0 (matmul) reads buffer 5 before it is "
      "written");
  // Stage 0 never gets the loss.
  expectRejected(
      replace(kPipelinePlan,
              "{\"op\": \"recv\", \"inputs\": [], \"outputs\": [4], "
              "\"attrs\": {\"axes\": [\"pp\"], \"peer\": 1, \"channel\": 1}}",
              ""),
      "stage 0: result buffer 4 is never written");
}

TEST(PlanTest, RejectsMalformedSchedules) {
  expectRejected(replace(kPipelinePlan, "[\"F0\", \"F1\", \"step\"]",
                         "[\"F0\", \"X1\", \"step\"]"),
                 "stage 0: schedule entry 1: unknown action \"X1\"; expected "
                 "F<i>, B<i> or W<i> (micro-batch i, with .c<chunk>), R "
                 "before one of them for its receives, or step");
  expectRejected(replace(kPipelinePlan, "[\"F0\", \"F1\", \"step\"]",
                         "[\"F0\", \"F7\", \"step\"]"),
                 "stage 0: schedule entry 1 (F7): micro-batch 7 is out of "
                 "range [0, 2)");
  expectRejected(replace(kPipelinePlan, "[\"F0\", \"F1\", \"step\"]",
                         "[\"F0\", \"F1\", \"B1\", \"step\"]"),
                 "stage 0: schedule entry 2 (B1): the stage has no program "
                 "backward.c0");
  expectRejected(replace(kPipelinePlan, "[\"F0\", \"F1\", \"step\"]",
                         "[\"F0\", \"F0\", \"step\"]"),
                 "stage 0: schedule entry 1 (F0): forward.c0 already ran for "
                 "this micro-batch");
  expectRejected(replace(kPipelinePlan, "[\"F0\", \"F1\", \"step\"]",
                         "[\"F0\", \"step\"]"),
                 "stage 0: program forward.c0 runs 1 times in the schedule, "
                 "expected 2 (once per micro-batch)");
  expectRejected(replace(kPipelinePlan, "[\"F0\", \"F1\", \"step\"]",
                         "[\"F0\", \"step\", \"F1\"]"),
                 "stage 0: schedule entry 1: the step program must run last, "
                 "after every micro-batch");
  expectRejected(replace(kPipelinePlan, "\"name\": \"forward.c0\"",
                         "\"name\": \"sideways.c0\""),
                 "stage 0: program 0: unknown program \"sideways.c0\"; "
                 "expected step, or forward, backward or weight (with "
                 "_receive for its receives) then .c<chunk>");
  expectRejected(replace(kPipelinePlan, "\"micro_batches\": 2",
                         "\"micro_batches\": 0"),
                 "field \"micro_batches\": expected an integer in [1, "
                 "1048576], found 0");
}

/// kPipelinePlan with each stage's evaluation: its forward actions (and
/// their receives), then the loss's transfer in the step program.
std::string withEvaluations() {
  std::string plan =
      replace(kPipelinePlan, R"("schedule": ["F0", "F1", "step"]})",
              R"("schedule": ["F0", "F1", "step"], "evaluation": )"
              R"({"actions": ["F0", "F1"], "step_instructions": [0]}})");
  return replace(
      plan, R"("schedule": ["RF0", "F0", "RF1", "F1", "step"]})",
      R"("schedule": ["RF0", "F0", "RF1", "F1", "step"], "evaluation": )"
      R"({"actions": ["RF0", "F0", "RF1", "F1"], "step_instructions": [0]}})");
}

TEST(PlanTest, ReadsEachStagesEvaluation) {
  StatusOr<Plan> plan = parsePlan(withEvaluations());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_TRUE(plan->stages[0].evaluation.has_value());
  EXPECT_EQ(plan->stages[0].evaluation->actions, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(plan->stages[1].evaluation->actions,
            (std::vector<size_t>{0, 1, 2, 3}));
  // Stage 0's timeline: F0 and F1 (2 instructions each), then the step's
  // receive of the loss: all of it is forward.
  EXPECT_EQ(evaluationMask(*plan, 0), std::vector<bool>(5, true));
  EXPECT_EQ(evaluationMask(*plan, 1), std::vector<bool>(9, true));
  // A plan without one has none, and runs its steps as before.
  StatusOr<Plan> without = parsePlan(kPipelinePlan);
  ASSERT_TRUE(without.ok()) << without.status().message();
  EXPECT_FALSE(without->stages[0].evaluation.has_value());
  EXPECT_TRUE(evaluationMask(*without, 0).empty());
}

TEST(PlanTest, RejectsMalformedEvaluations) {
  std::string plan = withEvaluations();
  expectRejected(replace(plan, R"({"actions": ["F0", "F1"])",
                         R"({"actions": ["F1", "F0"])"),
                 "stage 0: evaluation action 1 (F0): expected an action of "
                 "the schedule after the evaluation's previous one, found "
                 "none");
  expectRejected(replace(plan, R"({"actions": ["F0", "F1"])",
                         R"({"actions": ["F0", "F1", "step"])"),
                 "stage 0: evaluation action 2 (step): expected a forward "
                 "action or its receives; an evaluation neither "
                 "differentiates nor steps");
  expectRejected(
      replace(plan, R"({"actions": ["F0", "F1"])", R"({"actions": "F0")"),
      "stage 0: evaluation: field \"actions\": expected an array "
      "of the schedule's forward actions, in its order");
  expectRejected(replace(plan, R"(["F0", "F1"], "step_instructions": [0])",
                         R"(["F0", "F1"], "step_instructions": [1])"),
                 "stage 0: evaluation step instruction 0: expected an index "
                 "of the step program in [0, 1) (ascending), found 1");
  expectRejected(replace(plan, R"(["F0", "F1"], "step_instructions": [0])",
                         R"(["F0", "F1"], "step_instructions": [])"),
                 "stage 0: evaluation: result buffer 4 is never written");
  expectRejected(replace(plan, R"({"actions": ["RF0", "F0", "RF1", "F1"])",
                         R"({"actions": ["F0", "RF1", "F1"])"),
                 "stage 1: evaluation: action F0 instruction 0 (matmul) "
                 "reads buffer 5 before it is written");
  expectRejected(replace(plan,
                         R"(, "evaluation": {"actions": ["F0", "F1"], )"
                         R"("step_instructions": [0]})",
                         ""),
                 "stage 0 has no \"evaluation\" while stage 1 has one: a plan "
                 "evaluates on every stage or on none");
}

TEST(PlanTest, RejectsValuesOutsideTheirScope) {
  // The step program runs once: it cannot touch a micro-batch's buffer.
  expectRejected(
      replace(kPipelinePlan, "\"outputs\": [4], \"attrs\": {\"axes\": [\"pp\"], "
                             "\"peer\": 1",
              "\"outputs\": [3], \"attrs\": {\"axes\": [\"pp\"], \"peer\": 1"),
      "stage 0: step instruction 0 (recv): buffer 3 holds one micro-batch's "
      "value, but the step program runs once per step");
  // A program of a micro-batch writes only the micro-batch's values...
  expectRejected(replace(kPipelinePlan, "\"inputs\": [0], \"outputs\": [5]",
                         "\"inputs\": [0], \"outputs\": [0]"),
                 "stage 0: forward.c0 instruction 0 (scale): writes buffer 0, "
                 "a value of the step, in a program that runs once per "
                 "micro-batch");
  // ...and totals of the step through accumulate only, from one of its own.
  expectRejected(replace(kPipelinePlan,
                         "{\"op\": \"accumulate\", \"inputs\": [3], "
                         "\"outputs\": [4]}",
                         "{\"op\": \"accumulate\", \"inputs\": [3], "
                         "\"outputs\": [3]}"),
                 "stage 1: forward.c0 instruction 2 (accumulate): expected a "
                 "micro-batch's buffer in and a step's buffer out, found "
                 "buffers 3 and 3");
  expectRejected(replace(kPipelinePlan,
                         "{\"op\": \"scale\", \"inputs\": [0], \"outputs\": "
                         "[5], \"attrs\": {\"factor\": 2.0}}",
                         "{\"op\": \"scale\", \"inputs\": [0], \"outputs\": "
                         "[5], \"attrs\": {\"factor\": 2.0}}, {\"op\": "
                         "\"accumulate\", \"inputs\": [5], \"outputs\": [5]}"),
                 "stage 0: forward.c0 instruction 1 (accumulate): expected a "
                 "micro-batch's buffer in and a step's buffer out");
  // Results name the plan's buffers, not the copies made for each
  // micro-batch when the schedule is expanded.
  expectRejected(replace(kPipelinePlan, "{\"buffer\": 4, \"role\": \"loss\"",
                         "{\"buffer\": 7, \"role\": \"loss\""),
                 "result 0: buffer id 7 is out of range [0, 6)");
  // A result is a value of the step.
  expectRejected(replace(kPipelinePlan, "{\"buffer\": 4, \"role\": \"loss\"",
                         "{\"buffer\": 3, \"role\": \"loss\""),
                 "result 0: buffer 3 holds one micro-batch's value; results "
                 "are the step's");
}
