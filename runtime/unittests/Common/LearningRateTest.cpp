//===- LearningRateTest.cpp - Learning-rate schedules ---------------------===//
//
// Tests that each schedule gives the rate its formula says at the phase
// boundaries, and that schedules the formulas do not define are refused.
//
//===----------------------------------------------------------------------===//

#include "trellis/Common/LearningRate.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace {

LrSchedule schedule(LrScheduleKind kind, int64_t warmup, int64_t decay,
                    int64_t wsd = 0) {
  LrSchedule s;
  s.kind = kind;
  s.peak = 1.0;
  s.minimum = 0.1;
  s.warmupSteps = warmup;
  s.decaySteps = decay;
  s.wsdDecaySteps = wsd;
  return s;
}

TEST(LearningRateTest, WarmupClimbsLinearlyToThePeak) {
  LrSchedule s = schedule(LrScheduleKind::Cosine, 4, 12);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 1), 0.25);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 4), 1.0);
}

TEST(LearningRateTest, CosineAndLinearDecayToTheMinimumAndStay) {
  LrSchedule cosine = schedule(LrScheduleKind::Cosine, 4, 12);
  EXPECT_DOUBLE_EQ(learningRateAt(cosine, 8), 0.55);
  EXPECT_DOUBLE_EQ(learningRateAt(cosine, 12), 0.1);
  EXPECT_DOUBLE_EQ(learningRateAt(cosine, 100), 0.1);
  LrSchedule linear = schedule(LrScheduleKind::Linear, 4, 12);
  EXPECT_DOUBLE_EQ(learningRateAt(linear, 8), 0.55);
  EXPECT_DOUBLE_EQ(learningRateAt(linear, 10), 0.325);
}

TEST(LearningRateTest, WsdHoldsThePeakUntilItsFinalDecay) {
  LrSchedule wsd = schedule(LrScheduleKind::Wsd, 2, 12, 4);
  EXPECT_DOUBLE_EQ(learningRateAt(wsd, 8), 1.0);
  EXPECT_DOUBLE_EQ(learningRateAt(wsd, 10), 0.55);
  EXPECT_DOUBLE_EQ(learningRateAt(wsd, 12), 0.1);
}

TEST(LearningRateTest, ConstantIsThePeakAfterWarmup) {
  LrSchedule constant = schedule(LrScheduleKind::Constant, 2, 0);
  EXPECT_EQ(checkLrSchedule(constant), "");
  EXPECT_DOUBLE_EQ(learningRateAt(constant, 1), 0.5);
  EXPECT_DOUBLE_EQ(learningRateAt(constant, 50), 1.0);
}

TEST(LearningRateTest, RefusesWhatTheFormulasDoNotDefine) {
  EXPECT_EQ(checkLrSchedule(schedule(LrScheduleKind::Cosine, 4, 4)),
            "--decay-steps: expected the step the decay ends at, after the 4 "
            "warmup steps, found 4");
  EXPECT_EQ(checkLrSchedule(schedule(LrScheduleKind::Wsd, 2, 12, 11)),
            "--wsd-decay-steps: expected 1 to 10 (the steps between warmup "
            "and --decay-steps), found 11");
  LrSchedule negative = schedule(LrScheduleKind::Linear, 0, 5);
  negative.minimum = -1;
  EXPECT_EQ(checkLrSchedule(negative),
            "--min-lr: expected a rate in [0, --lr 1], found -1");
  EXPECT_EQ(parseLrScheduleKind("polynomial"), std::nullopt);
  EXPECT_EQ(lrScheduleName(LrScheduleKind::Wsd), "wsd");
}

} // namespace
