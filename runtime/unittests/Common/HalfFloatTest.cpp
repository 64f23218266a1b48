//===- HalfFloatTest.cpp - bf16 and fp16 conversions ----------------------===//

#include "trellis/Common/HalfFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace trellis;

namespace {

TEST(HalfFloatTest, EveryBfloat16RoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    float wide = bfloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(wide))
      EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(wide))));
    else
      EXPECT_EQ(floatToBfloat16(wide), bits) << bits;
  }
}

// roundToBfloat16 and exactBfloat16 (32-bit arithmetic) give the bits of
// the 16-bit conversion, for every sign and exponent (NaNs and infinities
// included) with mantissas at, just below and just above each halfway
// point, and for the lowest 2^20 patterns (subnormals).
TEST(HalfFloatTest, RoundingInThirtyTwoBitsIsTheConversion) {
  auto expectSame = [](uint32_t bits) {
    float value = bitsToFloat(bits);
    float rounded = roundToBfloat16(value);
    ASSERT_EQ(floatBits(rounded),
              floatBits(bfloat16ToFloat(floatToBfloat16(value))))
        << std::hex << bits;
    ASSERT_EQ(exactBfloat16(rounded), floatToBfloat16(value)) << std::hex
                                                               << bits;
  };
  for (uint32_t top = 0; top < 0x10000u; ++top)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      expectSame(top << 16 | low);
  for (uint32_t bits = 0; bits < (1u << 20); ++bits)
    expectSame(bits);
}

TEST(HalfFloatTest, EveryHalfRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    float wide = halfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(wide))
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(wide))));
    else
      EXPECT_EQ(floatToHalf(wide), bits) << bits;
  }
}

TEST(HalfFloatTest, RoundsToNearestEven) {
  // bf16 of 1 + 2^-8 (halfway between 1 and 1 + 2^-7) is 1 (even); of
  // 1 + 3 * 2^-8 it is 1 + 2^-6 (even).
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(1.0f + 3 * 0x1p-8f)),
            1.0f + 0x1p-6f);
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(1.0f + 0x1p-8f + 0x1p-20f)),
            1.0f + 0x1p-7f);
  // fp16: 1 + 2^-11 ties to 1; 1 + 3 * 2^-11 to 1 + 2^-9.
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  // Subnormals: 2^-25 ties to 0, 3 * 2^-25 to 2^-23 (the second subnormal).
  EXPECT_EQ(halfToFloat(floatToHalf(0x1p-25f)), 0.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(3 * 0x1p-25f)), 0x1p-23f);
  EXPECT_EQ(halfToFloat(floatToHalf(0x1p-24f)), 0x1p-24f);
  // Rounding up across a binade.
  EXPECT_EQ(halfToFloat(floatToHalf(2047.9f)), 2048.0f);
}

TEST(HalfFloatTest, KeepsSpecialValuesAndOverflowsToInfinity) {
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(halfToFloat(floatToHalf(65504.0f)), 65504.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(65519.0f)), 65504.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(65520.0f)), inf);
  EXPECT_EQ(halfToFloat(floatToHalf(-1e9f)), -inf);
  EXPECT_EQ(halfToFloat(floatToHalf(inf)), inf);
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(-inf)), -inf);
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(3.4e38f)), inf);
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(nan))));
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(nan))));
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000u);
  EXPECT_EQ(floatToBfloat16(-0.0f), 0x8000u);
}

} // namespace
