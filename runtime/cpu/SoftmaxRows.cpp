//===- SoftmaxRows.cpp - Vectorized rows of softmax and attention ---------===//
//
// Compiled with -ffast-math (this file alone) so that GCC vectorizes the
// exponentials with libmvec's expf and reassociates the sums into vector
// partial sums: their order is fixed by the code generated, the same at
// every call. No check of a value lives here for fast-math's assumption
// of finite values to remove: NaN and infinity still propagate through
// exp, products and sums (rowMax's comparison skips a NaN element, as it
// does without fast-math; its exponential carries it into the row).
//
//===----------------------------------------------------------------------===//

#include "SoftmaxRows.h"

#include <algorithm>
#include <cmath>

namespace trellis::runtime::cpu {

namespace {

/// Elements per exp call: one AVX-512 vector.
constexpr int64_t kLanes = 16;

/// y[0, kLanes) = exp(x[i] - shift): a loop of constant length, so each
/// clone makes it the same vector calls wherever the lanes sit in a row.
__attribute__((always_inline)) inline void
expLanes(const float *x, float *y, float shift) {
#pragma omp simd
  for (int64_t i = 0; i < kLanes; ++i)
    y[i] = std::exp(x[i] - shift);
}

} // namespace

__attribute__((target_clones("avx512f", "default"))) double
expShifted(const float *x, float *y, int64_t n, float shift) {
  // Whole lanes, then the tail padded to a whole one: every element goes
  // through the same vector function (a remainder loop would use the
  // scalar expf, which rounds differently), so an element's value does not
  // depend on its place in the row or on the row's length.
  int64_t body = n - n % kLanes;
  for (int64_t start = 0; start < body; start += kLanes)
    expLanes(x + start, y + start, shift);
  if (body < n) {
    float in[kLanes], out[kLanes];
    std::fill(in, in + kLanes, shift);
    std::copy(x + body, x + n, in);
    expLanes(in, out, shift);
    std::copy(out, out + (n - body), y + body);
  }
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i)
    sum += y[i];
  return sum;
}

__attribute__((target_clones("avx512f", "default"))) float
rowMax(const float *x, int64_t n) {
  float max = x[0];
#pragma omp simd reduction(max : max)
  for (int64_t i = 0; i < n; ++i)
    max = x[i] > max ? x[i] : max;
  return max;
}

__attribute__((target_clones("avx512f", "default"))) double
rowDot(const float *a, const float *b, int64_t n) {
  double dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i)
    dot += double(a[i]) * b[i];
  return dot;
}

} // namespace trellis::runtime::cpu
