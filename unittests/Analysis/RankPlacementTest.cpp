//===- RankPlacementTest.cpp - Which pipeline ranks run each op -----------===//

#include "trellis/Analysis/RankPlacement.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace {

/// A step on two ranks: a forward on virtual stage 0 reads the weight
/// (argument 0); a backward on stage 1 reads its result; a micro-batch sum
/// marked for stage 1 sums the backward's value; a step op (an update)
/// reads the weight and the sum and returns the new weight (result 0,
/// updating argument 0); the loss (result 1) is made on stage 1.
PlacementProblem pipelineStep() {
  PlacementProblem problem;
  problem.ranks = 2;
  problem.ops.resize(4);
  problem.ops[0] = {true, 0, -1, {1}, {}};
  problem.ops[1] = {true, 1, -1, {2}, {1}};
  problem.ops[2] = {true, 1, 1, {3}, {}};
  problem.ops[3] = {false, 0, -1, {}, {0}};
  problem.argumentReaders = {{0, 3}, {}};
  problem.results = {{3, 0, true}, {1, -1, false}};
  return problem;
}

TEST(RankPlacementTest,
     ActionsRunOnTheirStagesRankAndSumsWhereTheirValueIsMade) {
  PlacementProblem problem = pipelineStep();
  // Sum a value of stage 0 although marked for stage 1.
  problem.ops[2].summed = 0;
  RankPlacement placement = placeOnRanks(problem);
  EXPECT_EQ(placement.opRanks[0], RankSet{0});
  EXPECT_EQ(placement.opRanks[1], RankSet{1});
  EXPECT_EQ(placement.virtualStages[2], 0);
  EXPECT_EQ(placement.opRanks[2], RankSet{0});
}

TEST(RankPlacementTest, StepOpsRunWhereTheirResultsAreNeeded) {
  RankPlacement placement = placeOnRanks(pipelineStep());
  // The update of the weight runs where the weight is read in micro-batches
  // (rank 0); the loss stays on rank 0, which reports it, though made on 1.
  EXPECT_EQ(placement.opRanks[3], RankSet{0});
  EXPECT_EQ(placement.resultRanks[0], RankSet{0});
  EXPECT_EQ(placement.resultRanks[1], RankSet{0});
  // The weight lives where it is read; the unread argument on rank 0.
  EXPECT_EQ(placement.argumentRanks[0], RankSet{0});
  EXPECT_EQ(placement.argumentRanks[1], RankSet{0});
}

TEST(RankPlacementTest, ATiedWeightIsUpdatedOnEveryRankThatReadsIt) {
  PlacementProblem problem = pipelineStep();
  // The backward on stage 1 reads the weight too (a tied head).
  problem.argumentReaders[0] = {0, 1, 3};
  RankPlacement placement = placeOnRanks(problem);
  EXPECT_EQ(placement.opRanks[3], (RankSet{0, 1}));
  EXPECT_EQ(placement.resultRanks[0], (RankSet{0, 1}));
  EXPECT_EQ(placement.argumentRanks[0], (RankSet{0, 1}));
}

TEST(RankPlacementTest, InterleavedStagesWrapAroundTheRanks) {
  PlacementProblem problem;
  problem.ranks = 2;
  for (int64_t stage = 0; stage < 4; ++stage)
    problem.ops.push_back({true, stage, -1, {}, {}});
  RankPlacement placement = placeOnRanks(problem);
  for (int64_t stage = 0; stage < 4; ++stage)
    EXPECT_EQ(placement.opRanks[stage], RankSet{stage % 2});
}

} // namespace
