//===- Matmul.cpp - Batched matrix products through OpenBLAS --------------===//

#include "Kernels.h"

#include <cblas.h>

namespace trellis::runtime::cpu {

Status runMatmul(const KernelArgs &args) {
  const Tensor &lhs = args.in(0), &rhs = args.in(1);
  Tensor &out = args.out(0);
  bool transposeLhs = args.instruction.flag("transpose_lhs");
  bool transposeRhs = args.instruction.flag("transpose_rhs");
  const std::vector<int64_t> &ls = lhs.shape(), &rs = rhs.shape();
  size_t rank = ls.size();
  int64_t m = ls[rank - (transposeLhs ? 1 : 2)];
  int64_t k = ls[rank - (transposeLhs ? 2 : 1)];
  int64_t n = rs[rs.size() - (transposeRhs ? 2 : 1)];
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < rank; ++d)
    batch *= ls[d];
  bool sharedRhs = rs.size() == 2;
  CBLAS_TRANSPOSE ta = transposeLhs ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = transposeRhs ? CblasTrans : CblasNoTrans;
  int lda = static_cast<int>(transposeLhs ? m : k);
  int ldb = static_cast<int>(transposeRhs ? k : n);
  if (m == 0 || n == 0 || batch == 0)
    return Status::success();
  if (k == 0) {
    std::fill(out.f32(), out.f32() + out.size(), 0.0f);
    return Status::success();
  }
  // A shared right-hand side with row-major lhs rows: one product over
  // every batch row at once.
  if (sharedRhs && !transposeLhs) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(batch * m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, lhs.f32(), lda,
                rhs.f32(), ldb, 0.0f, out.f32(), static_cast<int>(n));
    return Status::success();
  }
  for (int64_t b = 0; b < batch; ++b)
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, lhs.f32() + b * m * k, lda,
                rhs.f32() + (sharedRhs ? 0 : b * k * n), ldb, 0.0f,
                out.f32() + b * m * n, static_cast<int>(n));
  return Status::success();
}

} // namespace trellis::runtime::cpu
