//===- SoftmaxRows.h - Vectorized rows of softmax and attention -*- C++ -*-===//
//
// The per-row loops of softmax and of the attention kernels' score rows,
// vectorized with glibc's vector expf (libmvec: its documented bound is 4
// ulp; SoftmaxRowsTest measures it) and cloned for AVX-512. Each row's
// result depends on that row alone, so splitting rows over threads changes
// nothing.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CPU_SOFTMAXROWS_H
#define TRELLIS_RUNTIME_CPU_SOFTMAXROWS_H

#include <cstdint>

namespace trellis::runtime::cpu {

/// y[i] = exp(x[i] - shift) for i < n, in fp32; returns their sum, added in
/// double. `x` may equal `y`. A non-finite x or shift gives non-finite
/// values.
double expShifted(const float *x, float *y, int64_t n, float shift);

/// The largest of x[0, n), n >= 1.
float rowMax(const float *x, int64_t n);

/// sum of a[i] * b[i], in double.
double rowDot(const float *a, const float *b, int64_t n);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_SOFTMAXROWS_H
