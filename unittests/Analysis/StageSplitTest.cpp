//===- StageSplitTest.cpp - Balancing layers over pipeline stages ---------===//

#include "trellis/Analysis/StageSplit.h"
#include "trellis/Common/PipelineSchedule.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace {

StagedModelCost uniformModel(int64_t layers, PartCost embedding = {},
                             PartCost head = {}) {
  StagedModelCost model;
  model.embedding = embedding;
  model.layers.assign(layers, PartCost{1.0, 1.0});
  model.head = head;
  return model;
}

StageLayers balanced(const StagedModelCost &model, int64_t stages) {
  std::string error;
  std::optional<StageLayers> split = balanceStages(model, stages, &error);
  EXPECT_TRUE(split) << error;
  return split.value_or(StageLayers{});
}

TEST(StageSplitTest, UniformLayersSplitEvenly) {
  EXPECT_EQ(balanced(uniformModel(8), 4), (StageLayers{2, 2, 2, 2}));
  EXPECT_EQ(balanced(uniformModel(4), 4), (StageLayers{1, 1, 1, 1}));
  EXPECT_EQ(balanced(uniformModel(5), 1), (StageLayers{5}));
}

TEST(StageSplitTest, HeavyEndsGetFewerLayers) {
  // An embedding and a head worth two layers each: 24 layers plus 4 units
  // over 4 stages balance at exactly 7 units per stage, which only 5,7,7,5
  // achieves.
  StagedModelCost model = uniformModel(24, {2.0, 0.0}, {2.0, 0.0});
  StageLayers split = balanced(model, 4);
  EXPECT_EQ(split, (StageLayers{5, 7, 7, 5}));
  for (const PartCost &stage : stageCosts(model, split))
    EXPECT_DOUBLE_EQ(stage.time, 7.0);
}

TEST(StageSplitTest, MemoryBreaksTimeTies) {
  // Equal times everywhere; layer 0 is memory-heavy, so of the splits with
  // the same slowest stage the balancer keeps layer 0 alone.
  StagedModelCost model = uniformModel(4);
  for (PartCost &layer : model.layers)
    layer.time = 0;
  model.layers[0].memory = 10;
  EXPECT_EQ(balanced(model, 2), (StageLayers{1, 3}));
}

TEST(StageSplitTest, StageCostsPutEndsOnFirstAndLastStages) {
  StagedModelCost model = uniformModel(4, {0.5, 3.0}, {0.25, 5.0});
  std::vector<PartCost> costs = stageCosts(model, {1, 2, 1});
  ASSERT_EQ(costs.size(), 3u);
  EXPECT_DOUBLE_EQ(costs[0].time, 1.5);
  EXPECT_DOUBLE_EQ(costs[0].memory, 4.0);
  EXPECT_DOUBLE_EQ(costs[1].time, 2.0);
  EXPECT_DOUBLE_EQ(costs[2].time, 1.25);
  EXPECT_DOUBLE_EQ(costs[2].memory, 6.0);
}

TEST(StageSplitTest, MoreStagesThanLayersIsAnError) {
  std::string error;
  EXPECT_FALSE(balanceStages(uniformModel(2), 4, &error));
  EXPECT_EQ(error, "expected at least one layer per pipeline stage: 4 stages, "
                   "but the model has 2 layers");
  EXPECT_FALSE(balanceStages(uniformModel(2), 0, &error));
  EXPECT_EQ(error, "expected at least 1 pipeline stage, found 0");
}

TEST(StageSplitTest, UserSplitsAreVerified) {
  std::string error;
  EXPECT_TRUE(verifyStageLayers({6, 7, 7, 6}, 26, 4, &error));
  EXPECT_FALSE(verifyStageLayers({6, 7, 7}, 26, 4, &error));
  EXPECT_EQ(error, "expected 4 layer counts (one per pipeline stage), found 3");
  EXPECT_FALSE(verifyStageLayers({6, 0, 7, 13}, 26, 4, &error));
  EXPECT_EQ(error, "stage 1 has no layer: expected at least 1, found 0");
  EXPECT_FALSE(verifyStageLayers({6, 7, 7, 7}, 26, 4, &error));
  EXPECT_EQ(error,
            "expected layer counts summing to the model's 26 layers, found 27");
}

TEST(StageSplitTest, ParsesLayerCounts) {
  std::string error;
  EXPECT_EQ(parseStageLayers("6,7,7,6", &error), (StageLayers{6, 7, 7, 6}));
  EXPECT_EQ(parseStageLayers("3", &error), (StageLayers{3}));
  for (const char *bad :
       {"", "6,,7", "6,7,", "a", "-1,2", "6, 7", "99999999999999999999"}) {
    EXPECT_FALSE(parseStageLayers(bad, &error)) << bad;
    EXPECT_EQ(error,
              std::string("expected layer counts like 6,7,7,6, found '") + bad +
                  "'");
  }
}

TEST(StageSplitTest, UnequalStagesSlowTheWholePipeline) {
  // With per-stage durations the slowest stage sets the pace: GPipe over 2
  // stages and m micro-batches takes (m + 1) * slowest forward plus the same
  // for backward when one stage dominates.
  PipelineShape shape{2, 4, 1};
  std::string error;
  std::optional<PipelineStreams> streams =
      buildSchedule(ScheduleKind::GPipe, shape, &error);
  ASSERT_TRUE(streams) << error;
  PipelineCosts costs;
  costs.forwardByStage = {1.0, 3.0};
  costs.backwardByStage = {2.0, 6.0};
  std::optional<PipelineSimulation> simulation =
      simulateSchedule(*streams, shape, costs, &error);
  ASSERT_TRUE(simulation) << error;
  // Stage 1 runs 4 forwards (12) after the first arrives (1), then 4
  // backwards (24); stage 0's last backward follows (2).
  EXPECT_DOUBLE_EQ(simulation->makespan, 1 + 12 + 24 + 2);
  costs.forwardByStage = {1.0};
  EXPECT_FALSE(simulateSchedule(*streams, shape, costs, &error));
  EXPECT_EQ(error, "expected 2 per-stage durations, found 1");
}

} // namespace

namespace {

double makespanOf(const StagedModelCost &model, const StageLayers &split,
                  const PipelineStreams &streams, const PipelineShape &shape) {
  PipelineCosts costs;
  for (const PartCost &stage : stageCosts(model, split)) {
    costs.forwardByStage.push_back(stage.time / 3);
    costs.backwardByStage.push_back(stage.time * 2 / 3);
  }
  std::string error;
  std::optional<PipelineSimulation> simulation =
      simulateSchedule(streams, shape, costs, &error);
  EXPECT_TRUE(simulation) << error;
  return simulation ? simulation->makespan : 0;
}

TEST(StageSplitTest, SimulationEvensOutInterleavedRanks) {
  // 2 ranks x 2 chunks, 6 layers, embedding and head worth 2 layers each:
  // balancing the 4 virtual stages one by one gives 1,1,3,1 (no stage
  // above 3), which loads rank 0 (virtual stages 0 and 2) with 6 units
  // against rank 1's 4; the simulation prefers 1,2,2,1 (makespan 44
  // against 49 with 8 micro-batches).
  // No memory anywhere, so nothing breaks the balancer's time ties.
  StagedModelCost model = uniformModel(6, {2.0, 0.0}, {2.0, 0.0});
  for (PartCost &layer : model.layers)
    layer.memory = 0;
  PipelineShape shape{2, 8, 2};
  std::string error;
  std::optional<PipelineStreams> streams =
      buildSchedule(ScheduleKind::Interleaved, shape, &error);
  ASSERT_TRUE(streams) << error;
  StageLayers balancedSplit = balanced(model, 4);
  StageLayers refined =
      refineStagesBySimulation(model, balancedSplit, *streams, shape, 1.0 / 3);
  EXPECT_EQ(balancedSplit, (StageLayers{1, 1, 3, 1}));
  EXPECT_EQ(refined, (StageLayers{1, 2, 2, 1}));
  EXPECT_DOUBLE_EQ(makespanOf(model, balancedSplit, *streams, shape), 49);
  EXPECT_DOUBLE_EQ(makespanOf(model, refined, *streams, shape), 44);
  // A split that cannot improve stays as it is.
  StagedModelCost uniform = uniformModel(8);
  EXPECT_EQ(
      refineStagesBySimulation(uniform, {2, 2, 2, 2}, *streams, shape, 1.0 / 3),
      (StageLayers{2, 2, 2, 2}));
}

} // namespace
