//===- GemmTest.cpp - The CPU kernels' f32 matrix products ----------------===//
//
// gemm (oneDNN's sgemm) against a double-precision reference, for every
// transpose and for strided operands (leading dimensions longer than the
// rows, as the attention kernels pass one head of [seq, heads, dim]), in
// one band of the result and in several, of rows or of columns; the same
// product run twice is bit-identical, and so are 1 and 2 threads; a
// product oneDNN refuses is reported, with the kernels' error text.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace trellis::runtime;
using namespace trellis::runtime::cpu;

namespace {

struct Case {
  bool transposeA, transposeB;
  int64_t m, n, k, padding;
};

/// "NT 1100x300x40 pad 16": the operands' transposes, m x n x k, padding.
std::string describe(const Case &c) {
  std::string text = std::string(c.transposeA ? "T" : "N") +
                     (c.transposeB ? "T" : "N") + " " + std::to_string(c.m) +
                     "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
  return c.padding ? text + " pad " + std::to_string(c.padding) : text;
}

/// How gtest prints a case (test names and failures).
void PrintTo(const Case &c, std::ostream *os) { *os << describe(c); }

/// op(x)[r][c] of a stored row-major matrix with leading dimension ld.
float at(const std::vector<float> &x, bool transpose, int64_t ld, int64_t r,
         int64_t c) {
  return transpose ? x[c * ld + r] : x[r * ld + c];
}

class GemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmTest, MatchesTheReference) {
  const Case &p = GetParam();
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  // Stored shapes: op(a) m x k, op(b) k x n; rows padded by `padding`.
  int64_t aRows = p.transposeA ? p.k : p.m, aCols = p.transposeA ? p.m : p.k;
  int64_t bRows = p.transposeB ? p.n : p.k, bCols = p.transposeB ? p.k : p.n;
  int64_t lda = aCols + p.padding, ldb = bCols + p.padding,
          ldc = p.n + p.padding;
  std::vector<float> a(aRows * lda), b(bRows * ldb), c(p.m * ldc);
  for (float &x : a)
    x = uniform(generator);
  for (float &x : b)
    x = uniform(generator);
  for (float &x : c)
    x = uniform(generator);
  std::vector<float> original = c;
  float alpha = 0.5f, beta = 2.0f;
  ASSERT_TRUE(gemm(p.transposeA, p.transposeB, p.m, p.n, p.k, alpha,
                   a.data(), lda, b.data(), ldb, beta, c.data(), ldc));
  for (int64_t r = 0; r < p.m; ++r)
    for (int64_t col = 0; col < p.n; ++col) {
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < p.k; ++i) {
        double term = double(at(a, p.transposeA, lda, r, i)) *
                      at(b, p.transposeB, ldb, i, col);
        sum += term;
        magnitude += std::fabs(term);
      }
      double expected = alpha * sum + beta * original[r * ldc + col];
      EXPECT_NEAR(c[r * ldc + col], expected, 1e-6 * (magnitude + 1))
          << "at " << r << ", " << col;
    }
  // Padding between rows is left alone.
  for (int64_t r = 0; r < p.m; ++r)
    for (int64_t col = p.n; col < ldc; ++col)
      EXPECT_EQ(c[r * ldc + col], original[r * ldc + col]);
  // Deterministic: the same product again gives the same bits.
  std::vector<float> again = original;
  ASSERT_TRUE(gemm(p.transposeA, p.transposeB, p.m, p.n, p.k, alpha,
                   a.data(), lda, b.data(), ldb, beta, again.data(), ldc));
  EXPECT_EQ(again, c);
}

INSTANTIATE_TEST_SUITE_P(
    Products, GemmTest,
    ::testing::Values(Case{false, false, 37, 29, 53, 0},
                      Case{false, true, 64, 128, 32, 0},
                      Case{true, false, 128, 32, 64, 0},
                      Case{true, true, 17, 40, 9, 0},
                      Case{false, true, 128, 128, 32, 224},
                      Case{true, false, 128, 32, 128, 224},
                      Case{false, false, 300, 200, 100, 0},
                      // Bands of columns, then of rows: two narrow
                      // ones, then one per 512.
                      Case{true, false, 256, 300, 50, 0},
                      Case{false, false, 270, 100, 30, 8},
                      Case{true, false, 300, 1100, 70, 0},
                      Case{false, true, 1100, 300, 40, 16}),
    [](const ::testing::TestParamInfo<Case> &info) {
      std::string name = describe(info.param);
      std::replace(name.begin(), name.end(), ' ', '_');
      return name;
    });

/// op(a) op(b) on `threads` threads.
std::vector<float> product(int threads, bool transposeA, int64_t m, int64_t n,
                           int64_t k) {
  std::mt19937 generator(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (float &x : a)
    x = uniform(generator);
  for (float &x : b)
    x = uniform(generator);
  int previous = omp_get_max_threads();
  omp_set_num_threads(threads);
  EXPECT_TRUE(gemm(transposeA, false, m, n, k, 1.0f, a.data(),
                   transposeA ? m : k, b.data(), n, 0.0f, c.data(), n));
  omp_set_num_threads(previous);
  return c;
}

// Weight gradients' shape (a transposed left-hand side, a long sum): left
// to thread the product itself, oneDNN split the sum over the threads here
// (an AVX2 EPYC: 1 and 2 threads differed in the last bits).
TEST(GemmThreads, OneAndTwoThreadsGiveTheSameBits) {
  for (auto [transposeA, m, n, k] :
       {std::tuple{true, int64_t(64), int64_t(64), int64_t(512)},
        std::tuple{false, int64_t(512), int64_t(64), int64_t(256)},
        std::tuple{true, int64_t(256), int64_t(256), int64_t(1024)},
        std::tuple{true, int64_t(300), int64_t(1100), int64_t(700)},
        std::tuple{false, int64_t(1100), int64_t(300), int64_t(200)}})
    EXPECT_EQ(product(1, transposeA, m, n, k), product(2, transposeA, m, n, k))
        << m << " x " << n << " over " << k;
}

TEST(GemmRefusal, IsReported) {
  std::vector<float> a(64), b(64), c(64);
  // A leading dimension shorter than the rows it strides over.
  EXPECT_FALSE(gemm(false, false, 8, 8, 8, 1.0f, a.data(), 4, b.data(), 8,
                    0.0f, c.data(), 8));
  EXPECT_EQ(gemmFailure("matmul").message(),
            "cpu: matmul: a matrix product failed in oneDNN's sgemm (no "
            "memory for its workspace, or invalid sizes)");
}

} // namespace
