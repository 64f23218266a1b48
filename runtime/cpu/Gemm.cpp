//===- Gemm.cpp - f32 matrix products through oneDNN's sgemm --------------===//

#include "Gemm.h"

#include <dnnl.h>

namespace trellis::runtime::cpu {

bool gemm(bool transposeA, bool transposeB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return true;
  return dnnl_sgemm(transposeA ? 'T' : 'N', transposeB ? 'T' : 'N', m, n, k,
                    alpha, a, lda, b, ldb, beta, c, ldc) == dnnl_success;
}

Status gemmFailure(const std::string &op) {
  return Status::error("cpu: " + op +
                       ": a matrix product failed in oneDNN's sgemm (no "
                       "memory for its workspace, or invalid sizes)");
}

} // namespace trellis::runtime::cpu
