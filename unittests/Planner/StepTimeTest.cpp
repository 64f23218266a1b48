//===- StepTimeTest.cpp - The planner's time model ------------------------===//

#include "trellis/Planner/StepTime.h"

#include "gtest/gtest.h"

using namespace trellis;
using namespace trellis::planner;

namespace {

ClusterSpec simpleCluster() {
  ClusterSpec cluster;
  cluster.name = "test";
  cluster.devicesPerNode = 4;
  cluster.device.memoryBytes = 1e10;
  cluster.device.memoryBandwidth = 1e12;
  cluster.device.peakFlops = {{"f32", 1e13}, {"bf16", 1e14}};
  cluster.device.gemmEfficiency = 0.5;
  cluster.device.gemmHalfSize = 0;
  cluster.device.attentionEfficiency = 0.25;
  cluster.intraNode = {1e11, 0, 1};
  cluster.interNode = {1e10, 0, 1};
  return cluster;
}

PricedWork compute(const std::string &name, const std::string &dtype,
                   double flops, int64_t bytes) {
  PricedWork work;
  work.phase = PricedWork::Phase::Forward;
  work.name = name;
  work.dtype = dtype;
  work.calls = 1;
  work.flops = flops;
  work.bytesRead = bytes;
  return work;
}

PricedWork collective(const std::string &key, int64_t wireBytes,
                      PricedWork::Phase phase = PricedWork::Phase::Forward) {
  PricedWork work;
  work.name = key;
  work.phase = phase;
  work.calls = 1;
  work.traffic = {1, wireBytes, wireBytes};
  return work;
}

/// pp=1, dp=2, tp=4 on nodes of 4: tp inside a node, dp across.
StepLayout dpAcrossNodes() {
  StepLayout layout;
  layout.axes = {{"dp", 2, AxisRole::Data}, {"tp", 4, AxisRole::Tensor}};
  return layout;
}

TEST(StepTimeTest, MatmulsRunAtTheGemmEfficiencyOfTheirSizes) {
  ClusterSpec cluster = simpleCluster();
  PricedWork matmul = compute("matmul", "bf16", 1e12, 0);
  matmul.gemmRows = matmul.gemmColumns = matmul.gemmDepth = 100;
  EXPECT_DOUBLE_EQ(computeSeconds(matmul, cluster), 1e12 / (1e14 * 0.5));
  // A half size of 100 halves each dimension's share: 1/8.
  cluster.device.gemmHalfSize = 100;
  EXPECT_DOUBLE_EQ(computeSeconds(matmul, cluster), 1e12 / (1e14 * 0.5 / 8));
  // Memory-bound ops take their bytes over the bandwidth; launches add.
  cluster.device.kernelOverhead = 1e-6;
  PricedWork add = compute("add", "bf16", 1e6, 4'000'000);
  add.calls = 3;
  EXPECT_DOUBLE_EQ(computeSeconds(add, cluster), 4e6 / 1e12 + 3e-6);
  // A causal attention skips half its products.
  PricedWork attention = compute("attention", "bf16", 1e12, 0);
  attention.causal = true;
  EXPECT_DOUBLE_EQ(computeSeconds(attention, cluster) - 1e-6,
                   0.5e12 / (1e14 * 0.25));
  // Collectives take no compute.
  EXPECT_EQ(computeSeconds(collective("all_reduce over tp", 100), cluster), 0);
}

TEST(StepTimeTest, MeasuredOpsRunAtTheirShareOfTheirRoofline) {
  ClusterSpec cluster = simpleCluster();
  cluster.device.memoryEfficiency = 0.5;
  cluster.device.opEfficiency = {{"gelu_tanh", 0.1}, {"attention", 0.05}};
  // Without an entry: bytes over the bandwidth at the memory efficiency.
  PricedWork add = compute("add", "f32", 0, 4'000'000);
  EXPECT_DOUBLE_EQ(computeSeconds(add, cluster), 4e6 / (1e12 * 0.5));
  // With one: the longer of bytes over the bandwidth and FLOPs over the
  // f32 peak, at the op's share.
  PricedWork gelu = compute("gelu_tanh", "f32", 1e6, 4'000'000);
  EXPECT_DOUBLE_EQ(computeSeconds(gelu, cluster), 4e6 / 1e12 / 0.1);
  gelu.flops = 1e9;
  EXPECT_DOUBLE_EQ(computeSeconds(gelu, cluster), 1e9 / 1e13 / 0.1);
  // Attention's entry replaces the attention efficiency.
  PricedWork attention = compute("attention", "bf16", 1e12, 0);
  EXPECT_DOUBLE_EQ(computeSeconds(attention, cluster), 1e12 / (1e14 * 0.05));
  PricedWork backward = compute("attention_grad", "bf16", 1e12, 0);
  EXPECT_DOUBLE_EQ(computeSeconds(backward, cluster), 1e12 / (1e14 * 0.25));
}

TEST(StepTimeTest, CollectivesUseTheLinksTheirGroupSpans) {
  ClusterSpec cluster = simpleCluster();
  StepLayout layout = dpAcrossNodes();
  std::string error;
  // tp: 4 adjacent ranks, one node.
  EXPECT_DOUBLE_EQ(*communicationSeconds(collective("all_reduce over tp", 1e9),
                                         layout, cluster, error),
                   1e9 / 1e11);
  // dp: ranks 0 and 4, one per node: the network share of one device.
  EXPECT_DOUBLE_EQ(*communicationSeconds(collective("all_reduce over dp", 1e9),
                                         layout, cluster, error),
                   1e9 / 1e10);
  // dp and tp: 4 members per node send over 4 network shares.
  EXPECT_DOUBLE_EQ(
      *communicationSeconds(collective("all_reduce over dp tp", 1e9), layout,
                            cluster, error),
      1e9 / 4e10);
  // Latency: log2(n) steps, twice for an all-reduce.
  cluster.intraNode.latency = 1e-6;
  EXPECT_DOUBLE_EQ(*communicationSeconds(collective("all_reduce over tp", 0),
                                         layout, cluster, error),
                   4e-6);
  EXPECT_DOUBLE_EQ(*communicationSeconds(collective("all_gather over tp", 0),
                                         layout, cluster, error),
                   2e-6);
  EXPECT_FALSE(communicationSeconds(collective("all_reduce over ep", 1), layout,
                                    cluster, error));
  EXPECT_EQ(error, "collective 'all_reduce over ep' names an axis the mesh "
                   "does not have");
}

TEST(StepTimeTest, TensorCollectivesAreExposedDataOnesHide) {
  ClusterSpec cluster = simpleCluster();
  StepLayout layout = dpAcrossNodes();
  layout.pipeline = {1, 2, 1};
  ShardedStepCost rank;
  // Per micro-batch: 1 ms of forward compute, 2 ms of backward.
  rank.work.push_back(compute("add", "bf16", 0, 1'000'000'000));
  PricedWork backward = compute("add", "bf16", 0, 2'000'000'000);
  backward.phase = PricedWork::Phase::Backward;
  rank.work.push_back(backward);
  // 0.5 ms of tp all-reduce in the forward: exposed.
  rank.work.push_back(collective("all_reduce over tp", 50'000'000));
  // 0.5 ms of dp all-gather in the forward: hidden behind its compute.
  rank.work.push_back(collective("all_gather over dp", 5'000'000));
  // 4 ms of gradient reduction in the step: after the actions (two
  // micro-batches), exposed.
  rank.work.push_back(
      collective("all_reduce over dp", 40'000'000, PricedWork::Phase::Step));
  std::string error;
  std::optional<StepTime> time =
      predictStepTime({rank}, layout, cluster, error);
  ASSERT_TRUE(time) << error;
  EXPECT_NEAR(time->seconds, 2 * (1.5e-3 + 2e-3) + 4e-3, 1e-12);
  const RankTime &slowest = time->ranks[0];
  EXPECT_NEAR(slowest.compute, 6e-3, 1e-12);
  EXPECT_NEAR(slowest.exposed.at("all_reduce over tp"), 1e-3, 1e-12);
  EXPECT_EQ(slowest.exposed.count("all_gather over dp"), 0u);
  EXPECT_NEAR(slowest.exposed.at("all_reduce over dp"), 4e-3, 1e-12);

  // One micro-batch: the reduction hides behind the backward (2 ms of it).
  layout.pipeline = {1, 1, 1};
  time = predictStepTime({rank}, layout, cluster, error);
  ASSERT_TRUE(time) << error;
  EXPECT_NEAR(time->seconds, 1.5e-3 + 2e-3 + 2e-3, 1e-12);

  // A device that hides a quarter of it (a CPU's communication thread):
  // 3/4 of the gather (0.375 ms) and 3 ms of the reduction stay; the
  // quarter of the reduction (1 ms) hides behind the backward.
  cluster.device.communicationOverlap = 0.25;
  time = predictStepTime({rank}, layout, cluster, error);
  ASSERT_TRUE(time) << error;
  EXPECT_NEAR(time->seconds, 1.5e-3 + 0.375e-3 + 2e-3 + 3e-3, 1e-12);
  EXPECT_NEAR(time->ranks[0].exposed.at("all_gather over dp"), 0.375e-3, 1e-12);
}

TEST(StepTimeTest, ScheduledTensorCollectivesHideBehindTheirAction) {
  ClusterSpec cluster = simpleCluster();
  StepLayout layout = dpAcrossNodes();
  layout.pipeline = {1, 1, 1};
  ShardedStepCost rank;
  // 2 ms of backward compute; 0.5 ms of tp all-gather the plan issues
  // before a GEMM (hidden), 0.5 ms of tp reduce-scatter it waits for at
  // once (exposed).
  PricedWork backward = compute("add", "bf16", 0, 2'000'000'000);
  backward.phase = PricedWork::Phase::Backward;
  rank.work.push_back(backward);
  PricedWork gather =
      collective("all_gather over tp", 50'000'000, PricedWork::Phase::Backward);
  gather.hidden = true;
  rank.work.push_back(gather);
  rank.work.push_back(collective("reduce_scatter over tp", 50'000'000,
                                 PricedWork::Phase::Backward));
  std::string error;
  std::optional<StepTime> time =
      predictStepTime({rank}, layout, cluster, error);
  ASSERT_TRUE(time) << error;
  EXPECT_NEAR(time->seconds, 2e-3 + 0.5e-3, 1e-12);
  EXPECT_EQ(time->ranks[0].exposed.count("all_gather over tp"), 0u);
  EXPECT_NEAR(time->ranks[0].exposed.at("reduce_scatter over tp"), 0.5e-3,
              1e-12);
}

TEST(StepTimeTest, CollectiveKindsRunAtTheirMeasuredRates) {
  ClusterSpec cluster = simpleCluster();
  StepLayout layout = dpAcrossNodes();
  std::string error;
  // 1e8 wire bytes over tp (inside a node, 1e11 B/s): 1 ms; a
  // reduce-scatter measured at a quarter of the link's rate takes 4.
  cluster.intraNode.relativeRate = {{"reduce_scatter", 0.25}, {"send", 2}};
  EXPECT_NEAR(*communicationSeconds(collective("all_reduce over tp", 1e8),
                                    layout, cluster, error),
              1e-3, 1e-12);
  EXPECT_NEAR(*communicationSeconds(collective("reduce_scatter over tp", 1e8),
                                    layout, cluster, error),
              4e-3, 1e-12);
  // Transfers and permutes take the rate of sends.
  EXPECT_NEAR(*communicationSeconds(collective("send over tp", 1e8), layout,
                                    cluster, error),
              0.5e-3, 1e-12);
  EXPECT_NEAR(
      *communicationSeconds(collective("collective_permute over tp", 1e8),
                            layout, cluster, error),
      0.5e-3, 1e-12);
}

TEST(StepTimeTest, PipelinesAreSimulated) {
  ClusterSpec cluster = simpleCluster();
  StepLayout layout;
  layout.axes = {{"pp", 2, AxisRole::Pipeline}};
  layout.pipeline = {2, 4, 1};
  std::vector<ShardedStepCost> ranks(2);
  for (ShardedStepCost &rank : ranks) {
    rank.work.push_back(compute("add", "bf16", 0, 1'000'000'000));
    PricedWork backward = compute("add", "bf16", 0, 2'000'000'000);
    backward.phase = PricedWork::Phase::Backward;
    rank.work.push_back(backward);
  }
  std::string error;
  std::optional<StepTime> time = predictStepTime(ranks, layout, cluster, error);
  ASSERT_TRUE(time) << error;
  // 1F1B with p = 2, m = 4, F = 1 ms, B = 2 ms: (m + p - 1)(F + B).
  EXPECT_NEAR(time->seconds, 5 * 3e-3, 1e-12);
  EXPECT_NEAR(time->ranks[0].bubble, 3e-3, 1e-12);
  // A layout whose pipeline does not match the estimate's ranks.
  layout.pipeline.ranks = 4;
  EXPECT_FALSE(predictStepTime(ranks, layout, cluster, error));
  EXPECT_EQ(error, "the estimate has 2 pipeline ranks, the layout 4");
}

} // namespace
