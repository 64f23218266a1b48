//===- CollectiveScheduleTest.cpp - Where collectives are issued ----------===//
//
// The rule -trellis-schedule-collectives and the cost query share, on
// steps written as data (test/Sharding/schedule-collectives.mlir runs the
// pass on IR).
//
//===----------------------------------------------------------------------===//

#include "CollectiveSchedule.h"

#include "gtest/gtest.h"

using namespace trellis;
using namespace trellis::sharding;

namespace {

using Kind = ScheduledOp::Kind;

ScheduledOp op(std::initializer_list<int64_t> reads,
               std::initializer_list<int64_t> writes, bool heavy = false,
               Kind kind = Kind::Compute, int64_t group = 1) {
  ScheduledOp scheduled;
  scheduled.reads.assign(reads.begin(), reads.end());
  scheduled.writes.assign(writes.begin(), writes.end());
  scheduled.heavy = heavy;
  scheduled.kind = kind;
  scheduled.group = group;
  return scheduled;
}

ScheduledOp collective(std::initializer_list<int64_t> reads,
                       std::initializer_list<int64_t> writes) {
  return op(reads, writes, false, Kind::Collective);
}

TEST(CollectiveScheduleTest, ComputeBoundMeansMoreThanEightFlopsPerByte) {
  EXPECT_TRUE(
      isComputeBound({2.0 * 64 * 64 * 64, 2 * 64 * 64 * 4, 64 * 64 * 4}));
  EXPECT_FALSE(isComputeBound({1024, 2 * 1024 * 4, 1024 * 4}));
  EXPECT_EQ(phaseGroup("backward"), phaseGroup("weight"));
  EXPECT_NE(phaseGroup("forward"), phaseGroup("backward"));
  EXPECT_NE(phaseGroup(""), phaseGroup("backward"));
}

TEST(CollectiveScheduleTest, AGatherIsIssuedBeforeTheGemmBeforeItsReader) {
  // 0: dx = dy w; 1: x = gather(xs); 2: dw = x^T dy.
  std::vector<ScheduledOp> ops{op({10, 11}, {20}, true), collective({12}, {21}),
                               op({21, 10}, {22}, true)};
  EXPECT_EQ(scheduleCollectives(ops), (std::vector<int64_t>{1, 0, 2}));
  std::vector<int64_t> order = scheduleCollectives(ops);
  std::vector<bool> hidden = hiddenCollectives(ops, order, {0, 0, 0});
  EXPECT_TRUE(hidden[1]);
  // The same ops in two actions (a split backward: the GEMM before the
  // gather is another action's): nothing of its own action hides it.
  hidden = hiddenCollectives(ops, order, {0, 1, 1});
  EXPECT_FALSE(hidden[1]);
}

TEST(CollectiveScheduleTest, AnIndependentGemmMovesBehindAScatter) {
  // 0: dw (read by nobody); 1: dx; 2: sum = dx + dx; 3: scatter(sum);
  // 4: its reader.
  std::vector<ScheduledOp> ops{op({10, 11}, {20}, true),
                               op({10, 12}, {21}, true), op({21}, {22}),
                               collective({22}, {23}), op({23}, {24})};
  std::vector<int64_t> order = scheduleCollectives(ops);
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 3, 0, 4}));
  EXPECT_TRUE(hiddenCollectives(ops, order, {0, 0, 0, 0, 0})[3]);
  // Without the independent GEMM the scatter stays exposed.
  ops[0].heavy = false;
  order = scheduleCollectives(ops);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(hiddenCollectives(ops, order, {0, 0, 0, 0, 0})[3]);
}

TEST(CollectiveScheduleTest, NothingMovesPastFencesOrOtherPhases) {
  // A GEMM, then a fence (a kernel that communicates), then a gather of
  // an argument: the gather stays after the fence, and the GEMM is not
  // taken past it either.
  std::vector<ScheduledOp> ops{op({10}, {20}, true),
                               op({10}, {21}, false, Kind::Fence),
                               collective({12}, {22}), op({22}, {23})};
  EXPECT_EQ(scheduleCollectives(ops), (std::vector<int64_t>{0, 1, 2, 3}));
  // A forward GEMM before a backward gather stays before it.
  ops[1] = op({10}, {21}, true, Kind::Compute, /*group=*/0);
  EXPECT_EQ(scheduleCollectives(ops), (std::vector<int64_t>{0, 1, 2, 3}));
}

} // namespace
