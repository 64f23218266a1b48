//===- Matmul.cpp - Batched f32 matrix products, and their sums ----------===//

#include "Gemm.h"
#include "Kernels.h"

#include "trellis/Runtime/OpShapes.h"

namespace trellis::runtime::cpu {

namespace {

/// out = op(lhs) op(rhs) + beta out, batched as graph.matmul.
Status multiply(const KernelArgs &args, float beta, const char *op) {
  const Tensor &lhs = args.in(0), &rhs = args.in(1);
  Tensor &out = args.out(0);
  const MatmulParameters &parameters = parametersOf<MatmulParameters>(args);
  bool transposeLhs = parameters.transposeLhs;
  bool transposeRhs = parameters.transposeRhs;
  MatmulSizes sizes =
      matmulSizes(lhs.shape(), rhs.shape(), transposeLhs, transposeRhs);
  int64_t m = sizes.m, k = sizes.k, n = sizes.n, batch = sizes.batch;
  bool sharedRhs = sizes.sharedRhs;
  int64_t lda = transposeLhs ? m : k;
  int64_t ldb = transposeRhs ? k : n;
  if (m == 0 || n == 0 || batch == 0)
    return Status::success();
  if (k == 0) {
    // Sums over nothing: zeros (added to nothing).
    if (beta == 0.0f)
      std::fill(out.f32(), out.f32() + out.size(), 0.0f);
    return Status::success();
  }
  // A shared right-hand side with row-major lhs rows: one product over
  // every batch row at once.
  if (sharedRhs && !transposeLhs) {
    if (!gemm(false, transposeRhs, batch * m, n, k, 1.0f, lhs.f32(), lda,
              rhs.f32(), ldb, beta, out.f32(), n))
      return gemmFailure(op);
    return Status::success();
  }
  for (int64_t b = 0; b < batch; ++b)
    if (!gemm(transposeLhs, transposeRhs, m, n, k, 1.0f, lhs.f32() + b * m * k,
              lda, rhs.f32() + (sharedRhs ? 0 : b * k * n), ldb, beta,
              out.f32() + b * m * n, n))
      return gemmFailure(op);
  return Status::success();
}

} // namespace

Status runMatmul(const KernelArgs &args) {
  // A total's first product of the step writes it; later ones add to it.
  bool adds = rowOf(args).effects.accumulates &&
              !parametersOf<MatmulParameters>(args).first;
  return multiply(args, adds ? 1.0f : 0.0f, args.instruction.op.c_str());
}

void registerMatmulKernels(KernelTable &table) {
  table.addFamily(OpFamily::Matmul, runMatmul);
}

} // namespace trellis::runtime::cpu
