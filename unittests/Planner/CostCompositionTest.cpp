//===- CostCompositionTest.cpp - Costs composed from short models ---------===//
//
// Every plan's cost composed from short models must be the cost query of
// the whole model: the same step time on a cluster and the same memory
// terms, for layouts on and off the short models' micro-batch sizes and
// data-parallel degrees.
//
//===----------------------------------------------------------------------===//

#include "trellis/Planner/CostComposition.h"

#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

using namespace trellis;
using namespace trellis::planner;

namespace {

PlanRequest requestFor(const std::string &config, int64_t layers,
                       int64_t globalBatch, int64_t seq) {
  auto buffer = llvm::MemoryBuffer::getFile(std::string(TRELLIS_EXAMPLES_DIR) +
                                            "/configs/" + config);
  PlanRequest request;
  if (!buffer) {
    ADD_FAILURE() << "cannot read " << config;
    return request;
  }
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  if (!json) {
    ADD_FAILURE() << config << ": " << llvm::toString(json.takeError());
    return request;
  }
  if (!json->getAsObject()) {
    ADD_FAILURE() << config << ": expected a JSON object";
    return request;
  }
  llvm::json::Object object = *json->getAsObject();
  object[object.get("n_layer") ? "n_layer" : "num_hidden_layers"] = layers;
  llvm::raw_string_ostream text(request.modelText);
  text << llvm::json::Value(std::move(object));
  request.modelSource = config;
  request.globalBatch = globalBatch;
  request.seq = seq;
  request.precision = "bf16";
  request.cluster = *clusterPreset("h100-sxm");
  return request;
}

PlanChoice plan(int64_t dp, int64_t tp, int64_t pp, int64_t microBatchSize,
                int64_t zero = 0, const std::string &schedule = "1f1b",
                int64_t chunks = 1) {
  PlanChoice choice;
  choice.mesh = meshOfDegrees(pp, dp, 1, 1, tp);
  choice.microBatchSize = microBatchSize;
  choice.settings.zero = zero;
  choice.settings.sequenceParallel = tp > 1;
  choice.settings.schedule = schedule;
  choice.settings.chunks = chunks;
  return choice;
}

/// `choice` with `size` ranks on an axis of `role` (expert or context).
PlanChoice withAxis(PlanChoice choice, AxisRole role, int64_t size) {
  auto degree = [&](AxisRole of) {
    return of == role ? size : choice.degree(of);
  };
  choice.mesh =
      meshOfDegrees(degree(AxisRole::Pipeline), degree(AxisRole::Data),
                    degree(AxisRole::Expert), degree(AxisRole::Context),
                    degree(AxisRole::Tensor));
  return choice;
}

/// Composed and whole costs of `choice` agree: step time within 1e-9
/// relative, memory terms within a byte per rank; the composer's lower
/// bound is at most that time.
void expectComposedIsWhole(CostComposer &composer, const PlanRequest &request,
                           const PlanChoice &choice) {
  SCOPED_TRACE(choice.text());
  std::string error;
  std::optional<ComposedCost> whole = compileWholeCost(request, choice, error);
  ASSERT_TRUE(whole) << error;
  std::optional<ComposedCost> composed = composer.compose(choice, error);
  ASSERT_TRUE(composed) << error;
  EXPECT_EQ(composed->modelParameters, whole->modelParameters);
  ASSERT_EQ(composed->ranks.size(), whole->ranks.size());
  ASSERT_EQ(composed->meshAxes, whole->meshAxes);
  for (size_t rank = 0; rank < whole->ranks.size(); ++rank) {
    const ShardedStepCost &a = composed->ranks[rank], &b = whole->ranks[rank];
    EXPECT_NEAR(a.parameterBytes, b.parameterBytes, 1) << "rank " << rank;
    EXPECT_NEAR(a.optimizerStateBytes, b.optimizerStateBytes, 1);
    EXPECT_NEAR(a.gradientBytes, b.gradientBytes, 1);
    EXPECT_EQ(a.savedActivationBytes, b.savedActivationBytes);
    EXPECT_EQ(a.weightGradientInputBytes, b.weightGradientInputBytes);
    EXPECT_NEAR(a.flops, b.flops, 1e-9 * b.flops);
  }
  StepLayout layout = stepLayoutOf(request, choice, whole->meshAxes);
  std::optional<StepTime> composedTime =
      predictStepTime(composed->ranks, layout, request.cluster, error);
  ASSERT_TRUE(composedTime) << error;
  std::optional<StepTime> wholeTime =
      predictStepTime(whole->ranks, layout, request.cluster, error);
  ASSERT_TRUE(wholeTime) << error;
  EXPECT_NEAR(composedTime->seconds, wholeTime->seconds,
              1e-9 * wholeTime->seconds);
  // The search prunes by a bound that no prediction goes below.
  std::optional<double> bound = composer.lowerBound(choice, request.cluster);
  ASSERT_TRUE(bound);
  EXPECT_GT(*bound, 0);
  EXPECT_LE(*bound, wholeTime->seconds * (1 + 1e-12));
}

TEST(CostCompositionTest, LlamaLayoutsComposeAsTheWholeModelCompiles) {
  PlanRequest request = requestFor("llama-tiny.json", 8, 64, 128);
  std::string why;
  std::unique_ptr<CostComposer> composer = CostComposer::create(request, why);
  ASSERT_TRUE(composer) << why;
  for (const PlanChoice &choice :
       {plan(1, 1, 1, 4), plan(1, 1, 1, 64), plan(8, 1, 1, 1),
        plan(2, 1, 1, 16, 1), plan(8, 1, 1, 2, 2), plan(16, 1, 1, 4, 3),
        plan(4, 2, 1, 8, 1), plan(1, 2, 2, 8), plan(2, 1, 4, 1, 1),
        plan(2, 2, 2, 4, 0, "zb-h1"), plan(1, 1, 2, 2, 0, "interleaved", 2),
        plan(4, 1, 2, 1, 1, "interleaved", 4),
        // 8 layers over 6 virtual stages: the balancer's uneven split.
        plan(1, 1, 2, 2, 0, "interleaved", 3), plan(1, 1, 8, 1),
        plan(1, 1, 4, 4, 0, "gpipe")})
    expectComposedIsWhole(*composer, request, choice);
}

// What the weight-gradient ops read of the backward's values (what ZB-H1's
// deferred W keeps) is priced per chunk, whatever the schedule, and
// composes as the whole model prices it.
TEST(CostCompositionTest, WeightGradientInputsArePricedPerChunk) {
  PlanRequest request = requestFor("llama-tiny.json", 4, 16, 128);
  std::string why;
  std::unique_ptr<CostComposer> composer = CostComposer::create(request, why);
  ASSERT_TRUE(composer) << why;
  for (const char *schedule : {"zb-h1", "1f1b"}) {
    PlanChoice choice = plan(1, 1, 2, 2, 0, schedule);
    std::optional<ComposedCost> whole = compileWholeCost(request, choice, why);
    ASSERT_TRUE(whole) << why;
    for (const ShardedStepCost &rank : whole->ranks) {
      ASSERT_EQ(rank.weightGradientInputBytes.size(), 1u);
      EXPECT_GT(rank.weightGradientInputBytes[0], 0) << schedule;
    }
    expectComposedIsWhole(*composer, request, choice);
  }
}

TEST(CostCompositionTest, GptLayoutsWithTiedWeightsCompose) {
  PlanRequest request = requestFor("gpt2-tiny.json", 6, 32, 64);
  std::string why;
  std::unique_ptr<CostComposer> composer = CostComposer::create(request, why);
  ASSERT_TRUE(composer) << why;
  PlanChoice recomputed = plan(2, 2, 1, 4, 1);
  recomputed.settings.recompute = "full";
  PlanChoice context = withAxis(plan(2, 1, 1, 2), AxisRole::Context, 2);
  for (const PlanChoice &choice :
       {plan(1, 1, 1, 8), plan(4, 1, 1, 2, 3), plan(2, 1, 3, 1, 1),
        plan(1, 2, 2, 2, 0, "zb-h1"), recomputed, context})
    expectComposedIsWhole(*composer, request, choice);
}

TEST(CostCompositionTest, TotalsCrossStagesOnceAStep) {
  // GPT-2 ties its embedding to the head: each end stage's gradient total
  // of it goes to the other once a step, after the micro-batches, while a
  // micro-batch's transfers carry its activation alone (the time model
  // takes the longest of those as every hop of the pipeline).
  PlanRequest request = requestFor("gpt2-tiny.json", 2, 8, 16);
  std::string error;
  std::optional<ComposedCost> cost =
      compileWholeCost(request, plan(1, 1, 2, 2), error);
  ASSERT_TRUE(cost) << error;
  const int64_t activationBytes = 2 * 16 * 64 * 2;  // [2, 16, 64] bf16
  const int64_t embeddingTotalBytes = 256 * 64 * 4; // [256, 64] f32
  for (const ShardedStepCost &rank : cost->ranks) {
    int64_t stepBytes = 0;
    for (const PricedWork &work : rank.work) {
      if (work.name != "send over pp" && work.name != "recv over pp")
        continue;
      SCOPED_TRACE(work.name);
      if (work.phase == PricedWork::Phase::Step)
        stepBytes += work.traffic.bytes;
      else
        EXPECT_EQ(work.traffic.bytes, activationBytes * work.calls);
    }
    EXPECT_GE(stepBytes, 2 * embeddingTotalBytes);
  }
}

TEST(CostCompositionTest, ExpertParallelLayoutsCompose) {
  PlanRequest request = requestFor("mixtral-tiny.json", 4, 32, 64);
  std::string why;
  std::unique_ptr<CostComposer> composer = CostComposer::create(request, why);
  ASSERT_TRUE(composer) << why;
  PlanChoice experts = withAxis(plan(2, 1, 1, 2, 1), AxisRole::Expert, 2);
  PlanChoice wide = withAxis(plan(4, 1, 1, 1, 3), AxisRole::Expert, 2);
  for (const PlanChoice &choice : {experts, wide})
    expectComposedIsWhole(*composer, request, choice);
  // The load-balancing loss pools every layer's router on the last stage:
  // its pipelines are compiled whole.
  PlanChoice pipelined =
      withAxis(plan(1, 1, 2, 2, 0, "1f1b"), AxisRole::Expert, 2);
  EXPECT_FALSE(composer->compose(pipelined, why));
  EXPECT_NE(why.find("pipelines compile whole"), std::string::npos) << why;
  // ZeRO over some of the batch's axes is not what the parts were fitted
  // to: compiled whole.
  PlanChoice someAxes = experts;
  someAxes.settings.zeroAxes = "ep";
  EXPECT_FALSE(composer->compose(someAxes, why));
  EXPECT_NE(why.find("compiles whole"), std::string::npos) << why;
}

TEST(CostCompositionTest, ModelsWhoseLayersDifferAreCompiledWhole) {
  PlanRequest request = requestFor("gemma3-tiny.json", 2, 8, 64);
  std::string why;
  EXPECT_FALSE(CostComposer::create(request, why));
  EXPECT_NE(why.find("layers differ"), std::string::npos) << why;
  request.format = ModelFormat::Mlir;
  EXPECT_FALSE(CostComposer::create(request, why));
}

} // namespace
