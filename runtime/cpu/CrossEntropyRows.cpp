//===- CrossEntropyRows.cpp - Vectorized log-sum-exp and softmax rows -----===//
//
// The inner loops of cross-entropy, compiled with -ffast-math (this file
// alone) so that GCC vectorizes them with glibc's vector exp (libmvec,
// documented within 4 ulp), and cloned for AVX-512 (picked at load time
// where the CPU has it). The exponentials and sums are in double: fp32
// exponentials differ by ulps between a whole row and a vocabulary
// shard's piece of it (shifted by another maximum), which AdamW turns
// into visible differences on parameters with near-zero gradients. Logits
// are finite (the callers' contract: a non-finite logit gives a
// non-finite loss either way). Each row's result depends on that row
// alone, so splitting the rows over threads changes nothing.
//
//===----------------------------------------------------------------------===//

#include "CrossEntropyRows.h"
#include "SoftmaxRows.h"

#include <algorithm>
#include <cmath>

namespace trellis::runtime::cpu {

namespace {

/// Elements per block of the online pass: small enough to stay in L1
/// between its two sweeps (maximum, then exponentials).
constexpr int64_t kBlock = 1024;

__attribute__((target_clones("avx512f", "default"))) double
blockSumExp(const float *x, int64_t n, float shift) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp(static_cast<double>(x[i]) - static_cast<double>(shift));
  return sum;
}

} // namespace

RowStats rowStats(const float *x, int64_t n) {
  // Online softmax by blocks: one pass over the row from memory.
  RowStats stats{x[0], 0.0};
  for (int64_t start = 0; start < n; start += kBlock) {
    int64_t count = std::min(kBlock, n - start);
    float max = std::max(stats.max, rowMax(x + start, count));
    stats.sum = stats.sum * std::exp(double(stats.max) - double(max)) +
                blockSumExp(x + start, count, max);
    stats.max = max;
  }
  return stats;
}

__attribute__((target_clones("avx512f", "default"))) void
softmaxRowScaled(const float *x, int64_t n, double logSumExp, double factor,
                 float *dx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    dx[i] = static_cast<float>(
        std::exp(static_cast<double>(x[i]) - logSumExp) * factor);
}

} // namespace trellis::runtime::cpu
