//===- Utf8Test.cpp - Well-formed UTF-8 in messages -----------------------===//

#include "trellis/Common/Utf8.h"

#include <gtest/gtest.h>

using namespace trellis;

TEST(Utf8Test, CharactersAreWholeOrNone) {
  EXPECT_EQ(utf8CharacterLength("a", 0), 1u);
  EXPECT_EQ(utf8CharacterLength("\xc3\xa9", 0), 2u);
  EXPECT_EQ(utf8CharacterLength("\xe2\x82\xac", 0), 3u);
  EXPECT_EQ(utf8CharacterLength("\xf0\x9f\x98\x80", 0), 4u);
  // Cut short, a lone continuation byte, overlong and out-of-range leads.
  EXPECT_EQ(utf8CharacterLength("\xe2\x82", 0), 0u);
  EXPECT_EQ(utf8CharacterLength("\xa9", 0), 0u);
  EXPECT_EQ(utf8CharacterLength("\xc0\xaf", 0), 0u);
  EXPECT_EQ(utf8CharacterLength("\xf5\x80\x80\x80", 0), 0u);
  EXPECT_EQ(utf8CharacterLength("a", 1), 0u);
}

TEST(Utf8Test, OtherBytesAreWrittenAsHex) {
  EXPECT_EQ(wellFormedUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(wellFormedUtf8("d\xc3=2"), "d\\xC3=2");
  EXPECT_EQ(wellFormedUtf8("\xff\xfe ok"), "\\xFF\\xFE ok");
  EXPECT_EQ(wellFormedUtf8(""), "");
}
