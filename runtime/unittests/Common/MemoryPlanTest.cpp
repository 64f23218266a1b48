//===- MemoryPlanTest.cpp - Arena placement and collective windows --------===//

#include "trellis/Common/MemoryPlan.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace {

TEST(MemoryPlanTest, WaitsAtTheFirstReaderWhenFewAreInFlight) {
  // Two small collectives: each waited for where its result is read.
  std::vector<int64_t> waits =
      planCollectiveWaits({{0, 5, 100}, {1, 3, 100}}, 10);
  // The second is read at 3; the stream runs in order, so the first is
  // done by then too.
  EXPECT_EQ(waits, (std::vector<int64_t>{3, 3}));
}

TEST(MemoryPlanTest, BoundsBytesInFlightBeyondTwo) {
  int64_t big = kInFlightCollectiveBytes / 2;
  // Three collectives read only at the end: the third would put more than
  // the budget in flight, so the program waits for the first at its issue.
  std::vector<int64_t> waits =
      planCollectiveWaits({{0, 20, big}, {2, 20, big}, {4, 20, big}}, 20);
  EXPECT_EQ(waits, (std::vector<int64_t>{4, 20, 20}));
  // Small ones stay in flight together.
  waits = planCollectiveWaits({{0, 20, 1}, {2, 20, 1}, {4, 20, 1}}, 20);
  EXPECT_EQ(waits, (std::vector<int64_t>{20, 20, 20}));
}

TEST(MemoryPlanTest, NeverWaitsPastTheEnd) {
  std::vector<int64_t> waits = planCollectiveWaits({{0, 50, 1}}, 10);
  EXPECT_EQ(waits, (std::vector<int64_t>{10}));
}

TEST(MemoryPlanTest, PlacesOverlappingBuffersApartAndReusesFreedBytes) {
  // a [0, 2] and b [1, 3] overlap; c [4, 5] reuses the bytes of either.
  std::vector<int64_t> offsets;
  int64_t arena = placeArena({{100, 0, 2}, {64, 1, 3}, {128, 4, 5}}, offsets);
  ASSERT_EQ(offsets.size(), 3u);
  EXPECT_EQ(offsets[2], 0);
  EXPECT_NE(offsets[0], offsets[1]);
  EXPECT_EQ(offsets[0] % kArenaAlignment, 0);
  EXPECT_EQ(offsets[1] % kArenaAlignment, 0);
  // 100 rounds up to 128: 128 + 64 for the two live at once.
  EXPECT_EQ(arena, 192);
  EXPECT_EQ(alignedArenaBytes(1), kArenaAlignment);
}

TEST(MemoryPlanTest, AnAliasSharesItsOperandsBytesForBothLifetimes) {
  // b (a reshape of a) shares a's bytes: one buffer living [0, 4], so c
  // [3, 5] cannot reuse them; d is persistent and e never made.
  std::vector<BufferSpan> buffers = {{256, 0, 1, false},
                                     {256, 1, 4, false},
                                     {256, 3, 5, false},
                                     {256, 0, 5, true},
                                     {256, -1, -1, false}};
  ArenaLayout layout = layOutArena(buffers, {{0, 1}, {3, 2}});
  ASSERT_EQ(layout.offsets.size(), 5u);
  EXPECT_EQ(layout.offsets[1], layout.offsets[0]);
  EXPECT_NE(layout.offsets[2], layout.offsets[0]);
  EXPECT_EQ(layout.offsets[3], -1);
  EXPECT_EQ(layout.offsets[4], -1);
  EXPECT_EQ(layout.bytes, 512);
}

TEST(MemoryPlanTest, AliasesChainAndSkipPersistentBuffers) {
  // c aliases b, which aliases a: one buffer [0, 6]; an alias of a
  // persistent buffer is none.
  std::vector<BufferSpan> buffers = {{64, 0, 1, false},
                                     {64, 1, 2, false},
                                     {64, 2, 6, false},
                                     {64, 3, 4, false}};
  ArenaLayout layout = layOutArena(buffers, {{0, 1}, {1, 2}});
  EXPECT_EQ(layout.offsets[2], layout.offsets[0]);
  EXPECT_EQ(layout.offsets[1], layout.offsets[0]);
  EXPECT_NE(layout.offsets[3], layout.offsets[0]);
  EXPECT_EQ(layout.bytes, 128);
  buffers[0].persistent = true;
  layout = layOutArena(buffers, {{0, 1}});
  EXPECT_EQ(layout.offsets[0], -1);
  EXPECT_GE(layout.offsets[1], 0);
}

} // namespace
