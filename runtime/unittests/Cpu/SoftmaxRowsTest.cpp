//===- SoftmaxRowsTest.cpp - Vectorized softmax rows' accuracy ------------===//
//
// expShifted (libmvec's expf) against the C library's exp in double: at
// most 4 ulp of the fp32 result over the range attention scores take
// (shifted scores, [-88, 0]) and slightly positive ones; the sum within
// 1e-12 relative of the double sum of its own values; rows of every length
// agree with the scalar function element for element (the vector body and
// the remainder loop round alike). rowMax and rowDot against plain loops.
//
//===----------------------------------------------------------------------===//

#include "SoftmaxRows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace trellis::runtime::cpu;

namespace {

/// The distance in units in the last place between two finite floats.
int64_t ulps(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  if ((x < 0) != (y < 0))
    return std::abs(int64_t(x & 0x7fffffff)) + std::abs(int64_t(y & 0x7fffffff));
  return std::abs(int64_t(x) - int64_t(y));
}

TEST(SoftmaxRows, ExpWithinFourUlp) {
  std::vector<float> x(1 << 16), y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = -88.0f + 90.0f * static_cast<float>(i) / x.size();
  float shift = 0.25f;
  double sum = expShifted(x.data(), y.data(), x.size(), shift);
  int64_t worst = 0;
  double own = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float expected = static_cast<float>(std::exp(double(x[i] - shift)));
    worst = std::max(worst, ulps(y[i], expected));
    own += y[i];
  }
  EXPECT_LE(worst, 4);
  EXPECT_NEAR(sum, own, 1e-12 * own);
}

TEST(SoftmaxRows, InPlaceAndEveryLength) {
  std::mt19937 generator(3);
  std::uniform_real_distribution<float> uniform(-20.0f, 5.0f);
  for (int64_t n : {1, 3, 15, 16, 17, 31, 100, 128, 1000}) {
    std::vector<float> x(n), y(n);
    for (float &value : x)
      value = uniform(generator);
    expShifted(x.data(), y.data(), n, 5.0f);
    // In place gives the same values.
    std::vector<float> inPlace = x;
    expShifted(inPlace.data(), inPlace.data(), n, 5.0f);
    EXPECT_EQ(inPlace, y) << "n = " << n;
    // Each element as a row of its own: the same value wherever it sits.
    for (int64_t i = 0; i < n; ++i) {
      float alone;
      expShifted(&x[i], &alone, 1, 5.0f);
      EXPECT_EQ(alone, y[i]) << "n = " << n << ", i = " << i;
    }
  }
}

TEST(SoftmaxRows, NonFiniteValuesPropagate) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.0f, nan, -1.0f}, y(3);
  EXPECT_TRUE(std::isnan(expShifted(x.data(), y.data(), 3, 0.0f)));
  EXPECT_TRUE(std::isnan(y[1]));
  float infinity = std::numeric_limits<float>::infinity();
  std::vector<float> big = {1.0f, infinity};
  EXPECT_TRUE(std::isinf(expShifted(big.data(), y.data(), 2, 0.0f)));
}

TEST(SoftmaxRows, MaxAndDot) {
  std::mt19937 generator(5);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (int64_t n : {1, 7, 16, 33, 257}) {
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = uniform(generator);
      b[i] = uniform(generator);
    }
    EXPECT_EQ(rowMax(a.data(), n), *std::max_element(a.begin(), a.end()));
    double dot = 0;
    for (int64_t i = 0; i < n; ++i)
      dot += double(a[i]) * b[i];
    EXPECT_NEAR(rowDot(a.data(), b.data(), n), dot, 1e-12 * n);
  }
}

} // namespace
