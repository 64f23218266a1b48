//===- Gemm.cpp - f32 matrix products through oneDNN's sgemm --------------===//
//
// oneDNN's sgemm, left to thread a product itself, may split the sum over k
// between threads for some shapes (on an AVX2 EPYC, a 64 x 64 product over
// k = 512: 1 and 2 threads differ in the last bits). So a product is cut
// into parts that the shape alone fixes, each a single-threaded sgemm over
// the whole of k, the parts split over the OpenMP threads: every thread
// count computes the same parts with the same calls and gives the same
// bits.
//
// The parts are bands of rows (or columns) of the result, one per 512 of
// them, but two wherever 256 or more: without, GPT-2 mini's q/k/v and
// projection weight gradients (256 x 768 and 256 x 256) ran on one core.
// sgemm calls of 512-row bands run as fast as the whole product on GPT-2
// mini's and 124M's shapes, on 1 core and on 2; so did 128- and 256-row
// bands on an AVX-512 EPYC (within 7%), but not on an AVX2 EPYC (1024 x
// 1024 over k = 256 in 256-row bands: 36 against 72-80 GFLOP/s a core),
// so narrower bands are used only where they split an otherwise single
// call (benchmarks/GemmBenchmark.cpp: trellis-f32 against onednn-sgemm).
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>

namespace trellis::runtime::cpu {

namespace {

constexpr int64_t kSmallBand = 128;
constexpr int64_t kBand = 512;

/// How many parts an extent of the result is cut into: at least two where
/// each gets kSmallBand, else one per kBand.
int64_t bandCount(int64_t extent) {
  return std::max<int64_t>(
      {1, std::min<int64_t>(2, extent / kSmallBand), extent / kBand});
}

} // namespace

bool gemm(bool transposeA, bool transposeB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return true;
  // Bands of rows where the result is taller than wide or has two
  // kBand-row bands, else bands of columns (weight gradients: a few
  // hundred features by thousands).
  bool byRows = m >= n || m >= 2 * kBand;
  int64_t extent = byRows ? m : n;
  int64_t bands = bandCount(extent);
  int64_t band = (extent + bands - 1) / bands;
  bool ok = true;
  // Inside a parallel region (attention's loops over heads) the bands run
  // in order on the calling thread. Else the region is entered even for a
  // single band: inside an active region oneDNN never threads a call.
#pragma omp parallel for schedule(static) reduction(&& : ok) if (!omp_in_parallel())
  for (int64_t index = 0; index < bands; ++index) {
    int64_t first = index * band, count = std::min(band, extent - first);
    char opA = transposeA ? 'T' : 'N', opB = transposeB ? 'T' : 'N';
    dnnl_status_t status =
        byRows ? dnnl_sgemm(opA, opB, count, n, k, alpha,
                            a + (transposeA ? first : first * lda), lda, b,
                            ldb, beta, c + first * ldc, ldc)
               : dnnl_sgemm(opA, opB, m, count, k, alpha, a, lda,
                            b + (transposeB ? first * ldb : first), ldb, beta,
                            c + first, ldc);
    ok = status == dnnl_success && ok;
  }
  return ok;
}

Status gemmFailure(const std::string &op) {
  return Status::error("cpu: " + op +
                       ": a matrix product failed in oneDNN's sgemm (no "
                       "memory for its workspace, or invalid sizes)");
}

} // namespace trellis::runtime::cpu
