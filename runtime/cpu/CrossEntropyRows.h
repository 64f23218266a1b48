//===- CrossEntropyRows.h - Vectorized rows of cross-entropy ----*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_CPU_CROSSENTROPYROWS_H
#define TRELLIS_RUNTIME_CPU_CROSSENTROPYROWS_H

#include <cstdint>

namespace trellis::runtime::cpu {

/// A row's maximum and sum of exp(x - maximum).
struct RowStats {
  float max;
  double sum;
};

/// The statistics of finite x[0, n), n >= 1, in one pass.
RowStats rowStats(const float *x, int64_t n);

/// dx[i] = exp(x[i] - logSumExp) * factor, in double: softmax's row times
/// a factor.
void softmaxRowScaled(const float *x, int64_t n, double logSumExp,
                      double factor, float *dx);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_CROSSENTROPYROWS_H
