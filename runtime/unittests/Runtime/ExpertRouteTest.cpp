//===- ExpertRouteTest.cpp - The router's choice and weights --------------===//
//
// moe_route on hand-computed tokens: DeepSeek-V3's score correction bias
// moves the choice but not the weights; its group limit keeps the choice
// to the best groups (a group ranked by its two highest scores), which
// differs from the plain top-k; ties go to the lower index. The bias's
// update moves it towards the mean load.
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace trellis;
using namespace trellis::runtime;
using namespace trellis::runtime::testing;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

/// One token's route: its experts and weights.
struct Route {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Route route(const std::vector<float> &logits, const std::vector<float> &bias,
            int64_t k, AttrMap attrs) {
  DeviceTensors tensors;
  int64_t count = static_cast<int64_t>(logits.size());
  int64_t in = tensors.add({1, count}, DType::F32);
  tensors.set(in, logits);
  std::vector<int64_t> inputs = {in};
  if (!bias.empty()) {
    int64_t b = tensors.add({count}, DType::F32);
    tensors.set(b, bias);
    inputs.push_back(b);
  }
  int64_t weights = tensors.add({1, k}, DType::F32);
  int64_t experts = tensors.addIds(std::vector<int32_t>(k, -1));
  attrs["top_k"] = integer(k);
  attrs["scoring"] = text("sigmoid");
  tensors.run("moe_route", inputs, {weights, experts}, attrs);
  Route result;
  result.weights = tensors.floats(weights);
  std::vector<char> bytes = tensors.bytes(experts);
  result.experts.resize(k);
  std::memcpy(result.experts.data(), bytes.data(), k * sizeof(int32_t));
  return result;
}

TEST(ExpertRouteTest, TheBiasMovesTheChoiceNotTheWeights) {
  std::vector<float> logits = {0, 1, 2, 3};
  // score + bias: 2.5, 0.73, 0.88, -0.05: experts 0 and 2, in that order.
  Route routed = route(logits, {2, 0, 0, -1}, 2,
                       {{"normalize", flag(true)}, {"scaling", real(2.5)}});
  EXPECT_EQ(routed.experts, (std::vector<int32_t>{0, 2}));
  double s0 = sigmoid(0), s2 = sigmoid(2);
  EXPECT_NEAR(routed.weights[0], 2.5 * s0 / (s0 + s2), 1e-6);
  EXPECT_NEAR(routed.weights[1], 2.5 * s2 / (s0 + s2), 1e-6);
  // Without the bias: the two highest scores.
  Route plain = route(logits, {}, 2, {});
  EXPECT_EQ(plain.experts, (std::vector<int32_t>{3, 2}));
  EXPECT_NEAR(plain.weights[0], sigmoid(3), 1e-6);
}

TEST(ExpertRouteTest, GroupsKeepTheChoiceToTheBestGroups) {
  // Four groups of two. Expert 0 scores highest, but its group's second
  // is low: the groups' two-best sums rank groups 1 (experts 2, 3) and 2
  // (experts 4, 5) first; experts 2 and 3 tie, the lower comes first.
  std::vector<float> logits = {5, -5, 1, 1, 0.5, 0.5, -5, -5};
  Route grouped = route(logits, {}, 2,
                        {{"groups", integer(4)}, {"top_groups", integer(2)}});
  EXPECT_EQ(grouped.experts, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(grouped.weights[0], sigmoid(1), 1e-6);
  Route plain = route(logits, {}, 2, {});
  EXPECT_EQ(plain.experts, (std::vector<int32_t>{0, 2}));
  // The bias counts in the groups' ranking too: lifting expert 1 makes
  // group 0 the best, and expert 1 (with 0) the choice.
  Route biased = route(logits, {0, 1.5f, 0, 0, 0, 0, 0, 0}, 2,
                       {{"groups", integer(4)}, {"top_groups", integer(1)}});
  EXPECT_EQ(biased.experts, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(biased.weights[0], sigmoid(-5), 1e-7);
}

TEST(ExpertRouteTest, GroupsRankedByTheirHighestKeepItsGroup) {
  // DeepSeek-V2's group-limited greedy (group_top 1): groups ranked by
  // their highest score keep expert 0's group (its 5), then group 1;
  // by their two highest (the test above) groups 1 and 2.
  std::vector<float> logits = {5, -5, 1, 1, 0.5, 0.5, -5, -5};
  Route grouped = route(logits, {}, 2,
                        {{"groups", integer(4)},
                         {"top_groups", integer(2)},
                         {"group_top", integer(1)}});
  EXPECT_EQ(grouped.experts, (std::vector<int32_t>{0, 2}));
  EXPECT_NEAR(grouped.weights[1], sigmoid(1), 1e-6);
  // One group: its two experts, whatever scores higher elsewhere.
  Route one = route({0, -1, 3, 2, 2.5f, -4, 1, 1}, {}, 2,
                    {{"groups", integer(4)},
                     {"top_groups", integer(1)},
                     {"group_top", integer(1)}});
  EXPECT_EQ(one.experts, (std::vector<int32_t>{2, 3}));
}

TEST(ExpertRouteTest, TheBiasUpdateMovesTowardsTheMeanLoad) {
  // Counts 1, 3, 2, 6: mean 3. Under it gains, at it stays, over it loses.
  DeviceTensors tensors;
  int64_t bias = tensors.add({4}, DType::F32);
  tensors.set(bias, {0.5f, 0.5f, -0.25f, 0});
  int64_t counts = tensors.add({4}, DType::F32);
  tensors.set(counts, {1, 3, 2, 6});
  int64_t updated = tensors.add({4}, DType::F32);
  tensors.run("expert_bias_update", {bias, counts}, updated,
              {{"rate", real(0.125)}});
  EXPECT_EQ(tensors.floats(updated),
            (std::vector<float>{0.625f, 0.5f, -0.125f, -0.125f}));
}

} // namespace
