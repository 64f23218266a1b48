//===- JsonShapeTest.cpp - Nesting and duplicate keys of JSON text --------===//

#include "trellis/Common/JsonShape.h"

#include <gtest/gtest.h>

#include <string>

using namespace trellis;

TEST(JsonShapeTest, AcceptsConfigsAndLeavesSyntaxToTheParser) {
  EXPECT_EQ(checkJsonShape(R"({"a": 1, "b": {"a": [1, {"a": 2}]}})", 4), "");
  // Keys inside strings and escaped quotes are not keys.
  EXPECT_EQ(checkJsonShape(R"({"a": "{\"a\": 1}", "b": "\"a\""})", 2), "");
  // Equal keys of different objects, and equal strings as values.
  EXPECT_EQ(checkJsonShape(R"([{"a": 1}, {"a": 1}, "a", "a"])", 2), "");
  EXPECT_EQ(checkJsonShape(R"({"a": "x", "b": "x"})", 1), "");
  // Malformed text: the parser's to report.
  EXPECT_EQ(checkJsonShape(R"({"a": )", 1), "");
  EXPECT_EQ(checkJsonShape(R"(}})", 1), "");
}

TEST(JsonShapeTest, RefusesDeepNestingAndRepeatedKeys) {
  EXPECT_EQ(checkJsonShape("[[[]]]", 2),
            "objects and arrays nest deeper than 2 levels (at byte 2)");
  std::string deep(100000, '[');
  EXPECT_EQ(checkJsonShape(deep, 32),
            "objects and arrays nest deeper than 32 levels (at byte 32)");
  EXPECT_EQ(checkJsonShape(R"({"a": 1, "b": [1, 2], "a": 2})", 4),
            "field \"a\" appears twice in one object (again at byte 22): "
            "expected each field once");
  EXPECT_EQ(checkJsonShape(R"({"o": {"k": 1, "k": 1}})", 4),
            "field \"k\" appears twice in one object (again at byte 15): "
            "expected each field once");
}
