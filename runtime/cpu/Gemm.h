//===- Gemm.h - f32 matrix products of the CPU kernels ----------*- C++ -*-===//
//
// Every f32 matrix product of the CPU kernels (matmul, the attention
// kernels' tiles) goes through oneDNN's row-major sgemm. It picks its
// kernels from the CPU's feature flags (AVX-512 or AVX2 code JIT-compiled
// at first use), where OpenBLAS 0.3.21 picks them from the CPU model and
// falls back to SSE3 kernels on models it does not know (an Emerald
// Rapids Xeon ran its sgemm at 15-22 GFLOP/s a core, against 110-130 for
// either library's AVX-512 kernels); on the GPT-2 124M products it is as
// fast as OpenBLAS's AVX-512 kernels or faster (benchmarks/GemmBenchmark).
// A product is cut into bands of the result fixed by its shape, each a
// single-threaded sgemm over the whole sum (Gemm.cpp): called outside a
// parallel region, the bands split over the device's OpenMP threads;
// inside one (the attention kernels' loops over heads), they run on the
// calling thread. The result does not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CPU_GEMM_H
#define TRELLIS_RUNTIME_CPU_GEMM_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <string>

namespace trellis::runtime::cpu {

/// c = alpha op(a) op(b) + beta c over row-major matrices: op(a) is m x k,
/// op(b) k x n, c m x n; `lda`, `ldb` and `ldc` are the stored matrices'
/// row strides. False when oneDNN refuses the product: it could not
/// allocate its workspace, or a leading dimension is shorter than its
/// rows (the kernels' sizes are valid by construction).
[[nodiscard]] bool gemm(bool transposeA, bool transposeB, int64_t m,
                        int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc);

/// The error of kernel `op` after one of its products failed.
Status gemmFailure(const std::string &op);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_GEMM_H
