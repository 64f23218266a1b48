//===- PipelineScheduleTest.cpp - Schedules, checker and simulator --------===//

#include "trellis/Common/PipelineSchedule.h"

#include <gtest/gtest.h>

#include <map>

using namespace trellis;

namespace trellis {
/// How gtest prints a schedule kind in test names' parameters.
void PrintTo(ScheduleKind kind, std::ostream *os) {
  *os << scheduleKindName(kind);
}
} // namespace trellis

namespace {

PipelineSimulation simulate(ScheduleKind kind, PipelineShape shape,
                            PipelineCosts costs = {}) {
  std::string error;
  std::optional<PipelineStreams> streams = buildSchedule(kind, shape, &error);
  EXPECT_TRUE(streams) << error;
  std::optional<PipelineSimulation> simulation =
      simulateSchedule(*streams, shape, costs, &error);
  EXPECT_TRUE(simulation) << error;
  return *simulation;
}

std::string failureOf(const PipelineStreams &streams, PipelineShape shape) {
  std::string error;
  EXPECT_FALSE(simulateSchedule(streams, shape, {}, &error));
  return error;
}

class UniformBubbleTest
    : public ::testing::TestWithParam<std::tuple<ScheduleKind, int, int>> {};

// With uniform layers the bubble is (p - 1) / (m + p - 1) of the time, for
// GPipe and 1F1B alike.
TEST_P(UniformBubbleTest, MatchesTheClosedForm) {
  auto [kind, p, m] = GetParam();
  PipelineSimulation simulation = simulate(kind, {p, m, 1});
  EXPECT_NEAR(simulation.bubbleFraction, double(p - 1) / (m + p - 1), 1e-12);
  EXPECT_NEAR(simulation.makespan, 3.0 * (m + p - 1), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    GPipeAnd1F1B, UniformBubbleTest,
    ::testing::Combine(::testing::Values(ScheduleKind::GPipe,
                                         ScheduleKind::OneFOneB),
                       ::testing::Values(2, 4), ::testing::Values(1, 4, 8)),
    [](const auto &info) {
      // (No structured binding: its commas would split the macro's
      // arguments.)
      return std::string(std::get<0>(info.param) == ScheduleKind::GPipe
                             ? "GPipe"
                             : "OneFOneB") +
             "_p" + std::to_string(std::get<1>(info.param)) + "_m" +
             std::to_string(std::get<2>(info.param));
    });

// Interleaving v chunks per rank divides the bubble by v:
// (p - 1) / (v m + p - 1).
TEST(PipelineScheduleTest, InterleavedBubble) {
  for (int p : {2, 4})
    for (int v : {2, 3}) {
      int m = 8;
      PipelineSimulation simulation =
          simulate(ScheduleKind::Interleaved, {p, m, v});
      EXPECT_NEAR(simulation.bubbleFraction, double(p - 1) / (v * m + p - 1),
                  1e-12)
          << "p=" << p << " v=" << v;
    }
}

// ZB-H1 splits each backward into B and W (half the time each, F = B = W):
// the bubble falls below 1F1B's and approaches the ideal (p - 1) of 3m + p -
// 1 units, with no stage holding more than p micro-batches (1F1B's stage-0
// peak); every stage runs each kind in micro-batch order, W after its B.
TEST(PipelineScheduleTest, ZeroBubbleShrinksTheBubble) {
  for (int p : {2, 4, 8})
    for (int m : {4, 8, 16, 32}) {
      if (m < p)
        continue;
      PipelineSimulation zeroBubble =
          simulate(ScheduleKind::ZeroBubble, {p, m, 1});
      PipelineSimulation oneFOneB = simulate(ScheduleKind::OneFOneB, {p, m, 1});
      EXPECT_LT(zeroBubble.makespan, oneFOneB.makespan)
          << "p=" << p << " m=" << m;
      EXPECT_GE(zeroBubble.makespan, 3.0 * m + p - 1);
      // Within p - 1 units of the ideal once m >= 2p (what this greedy
      // order reaches at these sizes).
      if (m >= 2 * p) {
        EXPECT_LE(zeroBubble.makespan, 3.0 * m + 2 * (p - 1))
            << "p=" << p << " m=" << m;
      }
      for (int64_t live : zeroBubble.peakLiveActivations)
        EXPECT_LE(live, p);
    }
  std::string error;
  PipelineShape shape{4, 8, 1};
  std::optional<PipelineStreams> streams =
      buildSchedule(ScheduleKind::ZeroBubble, shape, &error);
  ASSERT_TRUE(streams) << error;
  for (const std::vector<PipelineAction> &stream : *streams) {
    std::map<PipelineAction::Kind, int64_t> next;
    for (const PipelineAction &action : stream) {
      if (action.kind == PipelineAction::Kind::Forward ||
          action.kind == PipelineAction::Kind::Backward ||
          action.kind == PipelineAction::Kind::WeightGradient) {
        EXPECT_EQ(action.microBatch, next[action.kind]++) << action.toString();
      }
      if (action.kind == PipelineAction::Kind::WeightGradient) {
        EXPECT_LT(action.microBatch, next[PipelineAction::Kind::Backward]);
      }
    }
    EXPECT_EQ(next[PipelineAction::Kind::WeightGradient], 8);
  }
  // A split backward without its weight gradient is incomplete.
  PipelineStreams broken = *streams;
  broken[0].pop_back();
  EXPECT_NE(failureOf(broken, shape).find("misses its weight gradient"),
            std::string::npos)
      << failureOf(broken, shape);
}

// 1F1B keeps at most min(p, m) micro-batches alive on stage 0; GPipe all m.
TEST(PipelineScheduleTest, LiveActivations) {
  for (int p : {2, 4})
    for (int m : {1, 4, 8}) {
      EXPECT_EQ(
          simulate(ScheduleKind::OneFOneB, {p, m, 1}).peakLiveActivations[0],
          std::min(p, m));
      EXPECT_EQ(simulate(ScheduleKind::GPipe, {p, m, 1}).peakLiveActivations[0],
                m);
      // The last stage runs each backward right after its forward.
      EXPECT_EQ(simulate(ScheduleKind::OneFOneB, {p, m, 1})
                    .peakLiveActivations[p - 1],
                1);
    }
}

// A split backward keeps what its weight gradient reads until W runs: ZB-H1
// defers W most on the last stage (B runs right after F there), and never
// beyond the micro-batches a stage holds; unsplit schedules keep none.
TEST(PipelineScheduleTest, PendingWeightGradients) {
  for (int p : {2, 4, 8}) {
    PipelineSimulation zeroBubble =
        simulate(ScheduleKind::ZeroBubble, {p, 2 * p, 1});
    for (int rank = 0; rank < p; ++rank) {
      EXPECT_GE(zeroBubble.peakPendingWeightGradients[rank], 1);
      EXPECT_LE(zeroBubble.peakPendingWeightGradients[rank],
                zeroBubble.peakLiveActivations[rank]);
    }
    EXPECT_GE(zeroBubble.peakPendingWeightGradients[p - 1],
              zeroBubble.peakPendingWeightGradients[0]);
    for (int64_t pending : simulate(ScheduleKind::OneFOneB, {p, 2 * p, 1})
                               .peakPendingWeightGradients)
      EXPECT_EQ(pending, 0);
  }
}

TEST(PipelineScheduleTest, TransfersDelayTheSchedule) {
  PipelineCosts costs;
  costs.transfer = 0.5;
  PipelineSimulation withTransfers =
      simulate(ScheduleKind::OneFOneB, {4, 8, 1}, costs);
  PipelineSimulation without = simulate(ScheduleKind::OneFOneB, {4, 8, 1});
  EXPECT_GT(withTransfers.makespan, without.makespan);
  EXPECT_GT(withTransfers.bubbleFraction, without.bubbleFraction);
}

TEST(PipelineScheduleTest, StreamsCarryTheirCommunication) {
  std::string error;
  PipelineStreams streams =
      *buildSchedule(ScheduleKind::OneFOneB, {2, 2, 1}, &error);
  std::vector<std::string> rank0, rank1;
  for (const PipelineAction &action : streams[0])
    rank0.push_back(action.toString());
  for (const PipelineAction &action : streams[1])
    rank1.push_back(action.toString());
  EXPECT_EQ(rank0,
            (std::vector<std::string>{"F0", "send F0", "F1", "send F1",
                                      "recv B0", "B0", "recv B1", "B1"}));
  EXPECT_EQ(rank1,
            (std::vector<std::string>{"recv F0", "F0", "B0", "send B0",
                                      "recv F1", "F1", "B1", "send B1"}));
}

// Tests that the checker rejects a broken order: rank 0 waits for a
// gradient before sending the activation it depends on.
TEST(PipelineScheduleTest, CheckerFindsDeadlocks) {
  using Kind = PipelineAction::Kind;
  PipelineStreams streams = {{{Kind::RecvGradient, 0, 0},
                              {Kind::Forward, 0, 0},
                              {Kind::SendActivation, 0, 0},
                              {Kind::Backward, 0, 0}},
                             {{Kind::RecvActivation, 0, 0},
                              {Kind::Forward, 0, 0},
                              {Kind::Backward, 0, 0},
                              {Kind::SendGradient, 0, 0}}};
  EXPECT_EQ(failureOf(streams, {2, 1, 1}),
            "the schedule deadlocks: rank 0 waits at recv B0; rank 1 waits at "
            "recv F0");
}

TEST(PipelineScheduleTest, CheckerFindsMissingReceivesAndActions) {
  using Kind = PipelineAction::Kind;
  // Rank 1 never receives F0: its forward runs without input.
  PipelineStreams streams = {{{Kind::Forward, 0, 0},
                              {Kind::SendActivation, 0, 0},
                              {Kind::RecvGradient, 0, 0},
                              {Kind::Backward, 0, 0}},
                             {{Kind::Forward, 0, 0},
                              {Kind::Backward, 0, 0},
                              {Kind::SendGradient, 0, 0}}};
  EXPECT_EQ(failureOf(streams, {2, 1, 1}),
            "rank 1: F0 runs before its activations are received");
  // Micro-batch 1 is never run.
  std::string error;
  PipelineStreams one = *buildSchedule(ScheduleKind::GPipe, {2, 1, 1}, &error);
  EXPECT_EQ(failureOf(one, {2, 2, 1}),
            "incomplete: micro-batch 1 misses its forward at virtual stage 0");
  // A send whose receive is missing.
  PipelineStreams unreceived = {{{Kind::Forward, 0, 0},
                                 {Kind::Backward, 0, 0},
                                 {Kind::SendGradient, 0, 0}}};
  EXPECT_EQ(failureOf(unreceived, {1, 1, 1}),
            "rank 0: send B0 has no stage to go to");
}

TEST(PipelineScheduleTest, RejectsImpossibleShapes) {
  std::string error;
  EXPECT_FALSE(buildSchedule(ScheduleKind::Interleaved, {4, 6, 2}, &error));
  EXPECT_EQ(error, "the interleaved schedule needs micro-batches (6) to be a "
                   "multiple of pipeline ranks (4)");
  EXPECT_FALSE(buildSchedule(ScheduleKind::OneFOneB, {4, 8, 2}, &error));
  EXPECT_EQ(error, "the 1f1b schedule runs one chunk per rank, found 2 (use "
                   "the interleaved schedule)");
  EXPECT_FALSE(buildSchedule(ScheduleKind::GPipe, {0, 8, 1}, &error));
  EXPECT_EQ(error, "expected pipeline ranks, micro-batches and chunks >= 1, "
                   "found 0, 8 and 1");
}

TEST(PipelineScheduleTest, TraceHasARowPerStage) {
  std::string trace = chromeTrace(simulate(ScheduleKind::OneFOneB, {2, 2, 1}));
  EXPECT_NE(trace.find("\"name\": \"F0\""), std::string::npos);
  EXPECT_NE(trace.find("\"args\": {\"name\": \"stage 1\"}"), std::string::npos);
}

/// Streams the checker refuses, each with what is wrong and where.
TEST(PipelineScheduleTest, RefusesStreamsThatCannotRun) {
  using Kind = PipelineAction::Kind;
  auto action = [](Kind kind, int64_t microBatch) {
    PipelineAction made;
    made.kind = kind;
    made.microBatch = microBatch;
    return made;
  };
  // One rank, one micro-batch unless said otherwise.
  EXPECT_EQ(failureOf({{}, {}}, {1, 1, 1}), "expected 1 streams, found 2");
  EXPECT_EQ(failureOf({{action(Kind::Forward, 3)}}, {1, 1, 1}),
            "rank 0: F3 is outside the schedule's 1 micro-batches and 1 "
            "chunks");
  EXPECT_EQ(failureOf({{action(Kind::Backward, 0)}}, {1, 1, 1}),
            "rank 0: B0 runs before its forward");
  EXPECT_EQ(failureOf({{action(Kind::Forward, 0), action(Kind::Backward, 0),
                        action(Kind::WeightGradient, 0),
                        action(Kind::WeightGradient, 0)}},
                      {1, 1, 1}),
            "rank 0: W0 runs twice");
  EXPECT_EQ(failureOf({{action(Kind::Forward, 0),
                        action(Kind::WeightGradient, 0)}},
                      {1, 1, 1}),
            "rank 0: W0 runs before its backward");
  // Two ranks: rank 0's backward needs rank 1's gradient first.
  EXPECT_EQ(failureOf({{action(Kind::Forward, 0),
                        action(Kind::SendActivation, 0),
                        action(Kind::Backward, 0)},
                       {action(Kind::RecvActivation, 0),
                        action(Kind::Forward, 0), action(Kind::Backward, 0)}},
                      {2, 1, 1}),
            "rank 0: B0 runs before its gradient is received");
  // A send nobody receives.
  EXPECT_EQ(failureOf({{action(Kind::Forward, 0),
                        action(Kind::SendActivation, 0)},
                       {}},
                      {2, 1, 1})
                .rfind("a message is never received: activation of "
                       "micro-batch 0 for virtual stage 1",
                       0),
            0u);
}

} // namespace
