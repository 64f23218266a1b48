//===- ActionNamesTest.cpp - Action program and schedule entry names ------===//

#include "trellis/Common/ActionNames.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace {

TEST(ActionNamesTest, ProgramNamesRoundTrip) {
  for (ActionKind kind :
       {ActionKind::Forward, ActionKind::Backward, ActionKind::Weight})
    for (bool receives : {false, true})
      for (int64_t chunk : {0, 3}) {
        ActionProgramName program{kind, receives, chunk};
        std::optional<ActionProgramName> parsed =
            parseProgramName(programName(program));
        ASSERT_TRUE(parsed) << programName(program);
        EXPECT_EQ(parsed->kind, kind);
        EXPECT_EQ(parsed->receives, receives);
        EXPECT_EQ(parsed->chunk, chunk);
      }
  EXPECT_EQ(programName({ActionKind::Backward, true, 1}),
            "backward_receive.c1");
  EXPECT_EQ(programName({ActionKind::Step, false, 0}), "step");
  EXPECT_EQ(parseProgramName("step")->kind, ActionKind::Step);
}

TEST(ActionNamesTest, ActionNamesRoundTrip) {
  EXPECT_EQ(actionName({ActionKind::Forward, false, 0}, 3, false), "F3");
  EXPECT_EQ(actionName({ActionKind::Backward, true, 1}, 12, true), "RB12.c1");
  EXPECT_EQ(actionName({ActionKind::Weight, false, 0}, 0, false), "W0");
  EXPECT_EQ(actionName({ActionKind::Step, false, 0}, -1, true), "step");
  std::optional<ScheduledActionName> parsed = parseActionName("RB12.c1");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->program.kind, ActionKind::Backward);
  EXPECT_TRUE(parsed->program.receives);
  EXPECT_EQ(parsed->program.chunk, 1);
  EXPECT_EQ(parsed->microBatch, 12);
  EXPECT_EQ(parseActionName("step")->microBatch, -1);
}

TEST(ActionNamesTest, RejectsMalformedNames) {
  for (const char *name : {"", "forward", "forward.c", "forward.cx",
                           "sideways.c0", "forward_receive", "step.c0",
                           "forward.c12345678"})
    EXPECT_FALSE(parseProgramName(name)) << name;
  for (const char *action : {"", "R", "X3", "F", "Fx", "F3.c", "F3.d1",
                             "F3.c1x", "F12345678", "RR3"})
    EXPECT_FALSE(parseActionName(action)) << action;
}

} // namespace
