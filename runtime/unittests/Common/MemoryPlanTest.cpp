//===- MemoryPlanTest.cpp - Arena placement and collective windows --------===//

#include "trellis/Common/MemoryPlan.h"

#include <gtest/gtest.h>

#include <algorithm>

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

TEST(MemoryPlanTest, ArenaDoesNotDependOnHowBuffersAreNumbered) {
  // Four equal buffers: placed in lifetime order they need two slots; in
  // the order a[0,1], b[4,5], c[2,5], d[0,3] first fit would need three.
  std::vector<ArenaBuffer> buffers = {
      {64, 0, 1}, {64, 4, 5}, {64, 2, 5}, {64, 0, 3}};
  std::vector<size_t> order = {0, 1, 2, 3};
  do {
    std::vector<ArenaBuffer> numbered;
    for (size_t i : order)
      numbered.push_back(buffers[i]);
    std::vector<int64_t> offsets;
    EXPECT_EQ(placeArena(numbered, offsets), 128);
  } while (std::next_permutation(order.begin(), order.end()));
}

/// First fit as stated: each buffer, largest first, at the lowest offset
/// (0 or a placed range's end) below every range live with it that begins
/// after it, the ranges sorted anew for each buffer.
int64_t placeArenaByDefinition(const std::vector<ArenaBuffer> &buffers,
                               std::vector<int64_t> &offsets) {
  offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    int64_t sizeA = alignedArenaBytes(buffers[a].bytes);
    int64_t sizeB = alignedArenaBytes(buffers[b].bytes);
    if (sizeA != sizeB)
      return sizeA > sizeB;
    if (buffers[a].first != buffers[b].first)
      return buffers[a].first < buffers[b].first;
    return buffers[a].last < buffers[b].last;
  });
  std::vector<size_t> placed;
  int64_t arena = 0;
  for (size_t index : order) {
    const ArenaBuffer &buffer = buffers[index];
    int64_t bytes = alignedArenaBytes(buffer.bytes);
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t other : placed)
      if (buffers[other].first <= buffer.last &&
          buffer.first <= buffers[other].last)
        busy.emplace_back(offsets[other],
                          offsets[other] +
                              alignedArenaBytes(buffers[other].bytes));
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto &[begin, stop] : busy) {
      if (offset + bytes <= begin)
        break;
      offset = std::max(offset, stop);
    }
    offsets[index] = offset;
    placed.push_back(index);
    arena = std::max(arena, offset + bytes);
  }
  return arena;
}

TEST(MemoryPlanTest, PlacementIsFirstFitByDefinition) {
  // Random programs: lifetimes short and long, sizes from empty to large,
  // many equal (the per-micro-batch copies of a pipeline's values).
  uint64_t state = 12345;
  auto next = [&](int64_t bound) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(bound));
  };
  for (int trial = 0; trial < 200; ++trial) {
    int64_t instructions = 1 + next(300);
    std::vector<ArenaBuffer> buffers(1 + next(400));
    for (ArenaBuffer &buffer : buffers) {
      buffer.first = next(instructions);
      int64_t span = next(4) == 0 ? next(instructions) : next(8);
      buffer.last = std::min(instructions - 1, buffer.first + span);
      buffer.bytes = next(3) == 0 ? 64 * (1 + next(4)) : next(100000);
    }
    std::vector<int64_t> offsets, expected;
    int64_t arena = placeArena(buffers, offsets);
    EXPECT_EQ(arena, placeArenaByDefinition(buffers, expected));
    EXPECT_EQ(offsets, expected) << "trial " << trial;
  }
}

/// A planned instruction of op `name` (null: a kernel outside the table)./// A
/// planned instruction of op `name` (null: a kernel outside the table).
PlannedInstruction instruction(const char *name, std::vector<int64_t> inputs,
                               std::vector<int64_t> outputs) {
  PlannedInstruction planned;
  planned.contract = name ? findOpContract(name) : nullptr;
  planned.overAxes = planned.contract && planned.contract->collective;
  planned.communicates =
      kernelCommunicates(planned.contract, planned.overAxes,
                         [](const std::string &) { return std::string(); });
  planned.inputs = std::move(inputs);
  planned.outputs = std::move(outputs);
  return planned;
}

/// A kernel reading `inputs` and making `outputs`.
PlannedInstruction kernel(std::vector<int64_t> inputs,
                          std::vector<int64_t> outputs) {
  return instruction(nullptr, std::move(inputs), std::move(outputs));
}

/// A send of `buffer` to stage `peer` on `channel`.
PlannedInstruction send(int64_t buffer, int64_t peer, int64_t channel) {
  PlannedInstruction planned = instruction("send", {buffer}, {});
  planned.peer = peer;
  planned.channel = channel;
  return planned;
}

/// A receive into `buffer` from stage `peer` on `channel`.
PlannedInstruction recv(int64_t buffer, int64_t peer, int64_t channel) {
  PlannedInstruction planned = instruction("recv", {}, {buffer});
  planned.peer = peer;
  planned.channel = channel;
  return planned;
}

/// Each send's completesAt, by stage (-2 for other instructions).
std::vector<std::vector<int64_t>>
completions(const std::vector<std::vector<PlannedInstruction>> &stages) {
  std::vector<std::vector<int64_t>> out;
  for (const std::vector<PlannedInstruction> &program : stages) {
    out.emplace_back();
    for (const PlannedInstruction &planned : program)
      out.back().push_back(planned.contract && planned.contract->name == "send"
                               ? planned.completesAt
                               : -2);
  }
  return out;
}

TEST(MemoryPlanTest, SendCompletesWhereItsCompletionIsKnown) {
  // 0 makes b0; 1 sends it, known received from 3 on; 2 receives b1;
  // 3 reads b1; 4 makes b2.
  std::vector<PlannedInstruction> program = {kernel({}, {0}), send(0, 1, 7),
                                             recv(1, 1, 8), kernel({1}, {3}),
                                             kernel({}, {2})};
  program[1].completesAt = 3;
  std::vector<PlannedBuffer> buffers(4, PlannedBuffer{64});
  StepMemoryPlan plan = planStepMemory(program, buffers, {});
  EXPECT_EQ(plan.waitPoints, (std::vector<int64_t>{-1, 3, 3, -1, -1}));
  // b0 is in use until 3, so b2 (made at 4) may take its bytes.
  EXPECT_EQ(plan.arena.offsets[2], plan.arena.offsets[0]);
  // Without a known completion, a send completes at the end of the step.
  program[1].completesAt = -1;
  plan = planStepMemory(program, buffers, {});
  EXPECT_EQ(plan.waitPoints[1], 5);
  EXPECT_NE(plan.arena.offsets[2], plan.arena.offsets[0]);
}

TEST(MemoryPlanTest, ASendIsKnownReceivedByAnyLaterTransferBack) {
  // Stage 1 of three in 1F1B runs F0 F1 B0: it sends the gradient of
  // micro-batch 0 after it read micro-batch 1's activation, so that
  // gradient's arrival proves both activations received.
  std::vector<std::vector<PlannedInstruction>> stages = {
      {kernel({}, {0}), send(0, 1, 0), kernel({}, {1}), send(1, 1, 1),
       recv(2, 1, 10), kernel({2}, {3})},
      {recv(0, 0, 0), kernel({0}, {4}), recv(1, 0, 1), kernel({1}, {5}),
       send(4, 0, 10)}};
  planSendCompletions(stages);
  EXPECT_EQ(completions(stages),
            (std::vector<std::vector<int64_t>>{{-2, 5, -2, 5, -2, -2},
                                               {-2, -2, -2, -2, -1}}));
}

TEST(MemoryPlanTest, ASendIsKnownReceivedThroughOtherStages) {
  // Around a ring (the interleaved schedule's last stage feeds stage 0's
  // next chunk): stage 0's activation to stage 1 is known received when
  // stage 2's transfer, sent after stage 1's reached it, arrives.
  std::vector<std::vector<PlannedInstruction>> stages = {
      {kernel({}, {0}), send(0, 1, 0), recv(2, 2, 2), kernel({}, {7}),
       kernel({2}, {3})},
      {recv(0, 0, 0), kernel({0}, {1}), send(1, 2, 1)},
      {recv(1, 1, 1), kernel({1}, {2}), send(2, 0, 2)}};
  planSendCompletions(stages);
  EXPECT_EQ(completions(stages)[0][1], 4);
  // Knowledge that came before the peer read the value proves nothing:
  // stage 1 sent before it read channel 0 here.
  stages[1] = {send(1, 2, 1), recv(0, 0, 0), kernel({0}, {1})};
  planSendCompletions(stages);
  EXPECT_EQ(completions(stages)[0][1], -1);
}

TEST(MemoryPlanTest, TransfersNoScheduleCanRunProveNothing) {
  // Each stage reads the other's value before sending its own: no order
  // runs them; the analysis stops and every send completes at the end.
  std::vector<std::vector<PlannedInstruction>> stages = {
      {recv(0, 1, 1), kernel({0}, {1}), send(1, 1, 0)},
      {recv(2, 0, 0), kernel({2}, {3}), send(3, 0, 1)}};
  planSendCompletions(stages);
  EXPECT_EQ(completions(stages),
            (std::vector<std::vector<int64_t>>{{-2, -2, -1}, {-2, -2, -1}}));
}

TEST(MemoryPlanTest, UpdatesInPlaceOnlyAfterTheirArgumentsLastReader) {
  // b0: a parameter; b1: its gradient; b2: sgd's new value of b0.
  std::vector<PlannedBuffer> buffers = {{64, PlannedBuffer::Kind::Argument},
                                        {64},
                                        {64, PlannedBuffer::Kind::Result}};
  std::vector<PlannedInstruction> program = {instruction(nullptr, {0}, {1}),
                                             instruction("sgd", {0, 1}, {2})};
  StepMemoryPlan plan = planStepMemory(program, buffers, {{2, 0}});
  EXPECT_EQ(plan.inPlace, (std::vector<int64_t>{-1, -1, 0}));
  EXPECT_TRUE(plan.persistent[2]);
  // A send of the parameter before the update reads it until the end of
  // the step: the new value needs bytes of its own.
  program.insert(program.begin() + 1, instruction("send", {0}, {}));
  plan = planStepMemory(program, buffers, {{2, 0}});
  EXPECT_EQ(plan.inPlace, (std::vector<int64_t>{-1, -1, -1}));
  // Reading the parameter as the gradient operand is not element by element
  // into the result either.
  program = {instruction(nullptr, {0}, {1}), instruction("sgd", {1, 0}, {2})};
  plan = planStepMemory(program, buffers, {{2, 0}});
  EXPECT_EQ(plan.inPlace[2], -1);
}

TEST(MemoryPlanTest, AccumulatorsAndReshapesStayOutOfTheirOwnArenaSlots) {
  // b0 accumulates into b1 (persistent); b2 reshapes b0 and shares its
  // bytes.
  std::vector<PlannedInstruction> program = {
      instruction(nullptr, {}, {0}), instruction("accumulate", {0}, {1}),
      instruction("reshape", {0}, {2}), instruction(nullptr, {2}, {})};
  std::vector<PlannedBuffer> buffers(3, PlannedBuffer{256});
  StepMemoryPlan plan = planStepMemory(program, buffers, {});
  EXPECT_TRUE(plan.persistent[1]);
  EXPECT_EQ(plan.arena.offsets[1], -1);
  EXPECT_EQ(plan.arena.offsets[2], plan.arena.offsets[0]);
  EXPECT_EQ(plan.arena.bytes, 256);
}

} // namespace
