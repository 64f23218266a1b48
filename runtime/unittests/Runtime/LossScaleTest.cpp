//===- LossScaleTest.cpp - fp16's dynamic loss scale ----------------------===//

#include "trellis/Runtime/Trainer.h"

#include <gtest/gtest.h>

using namespace trellis::runtime;

namespace {

TEST(LossScaleTest, HalvesOnOverflowAndDoublesAfterCleanSteps) {
  DynamicLossScale scale;
  EXPECT_EQ(scale.scale, 65536);
  scale.record(false);
  EXPECT_EQ(scale.scale, 32768);
  EXPECT_EQ(scale.skippedSteps, 1);
  for (int64_t i = 0; i + 1 < DynamicLossScale::kGrowthInterval; ++i)
    scale.record(true);
  EXPECT_EQ(scale.scale, 32768);
  scale.record(true);
  EXPECT_EQ(scale.scale, 65536);
  EXPECT_EQ(scale.cleanSteps, 0);
  // An overflow restarts the count of clean steps.
  for (int i = 0; i < 10; ++i)
    scale.record(true);
  scale.record(false);
  EXPECT_EQ(scale.cleanSteps, 0);
  EXPECT_EQ(scale.skippedSteps, 2);
  // The scale never drops below 1.
  for (int i = 0; i < 40; ++i)
    scale.record(false);
  EXPECT_EQ(scale.scale, 1);
}

} // namespace
