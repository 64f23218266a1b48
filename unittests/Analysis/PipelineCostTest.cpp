//===- PipelineCostTest.cpp - Part costs of imported models ---------------===//

#include "trellis/Analysis/PipelineCost.h"

#include "mlir/IR/MLIRContext.h"
#include "trellis/Frontend/ModelImporter.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace trellis {
/// How gtest prints a model family in test names' parameters.
void PrintTo(TransformerConfig::Family family, std::ostream *os) {
  *os << (family == TransformerConfig::Family::Gpt2 ? "gpt2" : "llama");
}
} // namespace trellis

namespace {

TransformerConfig tinyConfig(TransformerConfig::Family family, bool tied) {
  TransformerConfig config;
  config.family = family;
  config.numLayers = 3;
  config.hiddenSize = 32;
  config.numHeads = 4;
  config.numKvHeads = family == TransformerConfig::Family::Llama ? 2 : 4;
  config.headDim = 8;
  config.intermediateSize = 64;
  config.vocabSize = 96;
  config.maxPositions = 32;
  config.tieWordEmbeddings = tied;
  return config;
}

ModelPipelineCost costOf(mlir::MLIRContext &context,
                         const TransformerConfig &config) {
  auto module = importTransformer(context, config, {2, 16});
  EXPECT_TRUE(static_cast<bool>(module));
  auto forward = (*module)->lookupSymbol<mlir::func::FuncOp>("forward");
  mlir::FailureOr<ModelPipelineCost> cost =
      computePipelineCost(forward, RooflineRates{});
  EXPECT_TRUE(mlir::succeeded(cost));
  return *cost;
}

/// Weights and optimizer state over all parts (memory less activations).
double stateBytes(const ModelPipelineCost &cost) {
  double total = cost.parts.embedding.memory + cost.parts.head.memory -
                 cost.activations.embedding.memory -
                 cost.activations.head.memory;
  for (size_t layer = 0; layer < cost.parts.layers.size(); ++layer)
    total +=
        cost.parts.layers[layer].memory - cost.activations.layers[layer].memory;
  return total;
}

class PipelineCostTest
    : public ::testing::TestWithParam<
          std::tuple<TransformerConfig::Family, /*tied=*/bool>> {};

TEST_P(PipelineCostTest, EveryLayerCostsTheSame) {
  auto [family, tied] = GetParam();
  mlir::MLIRContext context;
  ModelPipelineCost cost = costOf(context, tinyConfig(family, tied));
  ASSERT_EQ(cost.parts.layers.size(), 3u);
  for (const PartCost &layer : cost.parts.layers) {
    EXPECT_GT(layer.time, 0);
    EXPECT_DOUBLE_EQ(layer.time, cost.parts.layers[0].time);
    EXPECT_DOUBLE_EQ(layer.memory, cost.parts.layers[0].memory);
  }
  EXPECT_GT(cost.parts.embedding.time, 0);
  EXPECT_GT(cost.parts.head.time, 0);
}

TEST_P(PipelineCostTest, StatesAreFourCopiesOfTheWeights) {
  // Weights, gradients and two AdamW moments; a tied embedding is held on
  // the first and on the last stage.
  auto [family, tied] = GetParam();
  TransformerConfig config = tinyConfig(family, tied);
  mlir::MLIRContext context;
  ModelPipelineCost cost = costOf(context, config);
  double weights = config.numParameters();
  if (tied)
    weights += config.vocabSize * config.hiddenSize;
  EXPECT_DOUBLE_EQ(stateBytes(cost), 4 * 4 * weights);
}

TEST_P(PipelineCostTest, BoundariesCarryTheResidualStream) {
  // GPT-2 sends only the residual stream [batch, seq, hidden]; Llama may
  // also reuse values computed once (rotary tables) across layers.
  auto [family, tied] = GetParam();
  mlir::MLIRContext context;
  ModelPipelineCost cost = costOf(context, tinyConfig(family, tied));
  double residual = 2 * 16 * 32 * 4;
  if (family == TransformerConfig::Family::Gpt2)
    EXPECT_DOUBLE_EQ(cost.boundaryBytes, residual);
  else
    EXPECT_GE(cost.boundaryBytes, residual);
}

INSTANTIATE_TEST_SUITE_P(
    Models, PipelineCostTest,
    ::testing::Combine(::testing::Values(TransformerConfig::Family::Gpt2,
                                         TransformerConfig::Family::Llama),
                       ::testing::Bool()),
    [](const auto &info) {
      return std::string(std::get<0>(info.param) ==
                                 TransformerConfig::Family::Gpt2
                             ? "Gpt2"
                             : "Llama") +
             (std::get<1>(info.param) ? "Tied" : "Untied");
    });

TEST(PipelineSplitTest, UniformLayersSplitEvenlyBetweenHeavyEnds) {
  mlir::MLIRContext context;
  TransformerConfig config =
      tinyConfig(TransformerConfig::Family::Llama, /*tied=*/false);
  config.numLayers = 8;
  ModelPipelineCost cost = costOf(context, config);
  std::string error;
  std::optional<StageLayers> split = balanceStages(cost.parts, 2, &error);
  ASSERT_TRUE(split) << error;
  EXPECT_EQ((*split)[0] + (*split)[1], 8);
  // The stage with the heavier end holds no more layers than the other.
  bool headHeavier = cost.parts.head.time > cost.parts.embedding.time;
  EXPECT_LE((*split)[headHeavier ? 1 : 0], (*split)[headHeavier ? 0 : 1]);
}

} // namespace
