//===- GemmMapping.h - A matmul instruction as a cuBLASLt call --*- C++ -*-===//
//
// The plan's matmul is row-major: result[b, m, n] = op(lhs[b])[m, k] ·
// op(rhs[b])[k, n], op a transpose where the instruction says so, a rank-2
// rhs shared by every batch. cuBLASLt is column-major. A row-major matrix
// is its transpose read column-major, so the call computes
// result^T = op(rhs)^T · op(lhs)^T: cuBLASLt's A is the rhs buffer and its
// B the lhs buffer, each with the transpose flag the instruction gives it,
// and its D (n rows, m columns, leading dimension n) is the row-major
// result. Plain C++: the CPU tests run a host column-major GEMM with
// exactly these arguments against the CPU's matmul.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_GEMMMAPPING_H
#define TRELLIS_RUNTIME_CUDA_GEMMMAPPING_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trellis::runtime::cuda {

/// One column-major operand of cuBLASLt: its stored rows and columns (before
/// the transpose), leading dimension, and stride between batches (0: one
/// matrix for every batch).
struct GemmOperand {
  bool transposed = false;
  int64_t rows = 0, columns = 0, leading = 0, batchStride = 0;
};

/// The arguments of one cuBLASLt matmul: D[rows × columns] =
/// op(A)[rows × k] · op(B)[k × columns], `batch` times.
struct GemmMapping {
  /// A reads the instruction's rhs, B its lhs.
  GemmOperand a, b;
  int64_t rows = 0, columns = 0, k = 0;
  /// D: leading dimension `rows`, batches `resultBatchStride` apart.
  int64_t resultLeading = 0, resultBatchStride = 0;
  int64_t batch = 1;
};

/// The cuBLASLt arguments of a matmul with operands of shapes `lhs` and
/// `rhs` and the instruction's transpose flags. A shared rhs with an
/// untransposed lhs folds the batches into one product of batch × m rows.
GemmMapping mapMatmul(const std::vector<int64_t> &lhs,
                      const std::vector<int64_t> &rhs, bool transposeLhs,
                      bool transposeRhs);

/// What cuBLASLt computes for `mapping` over f32 column-major buffers, by
/// definition (a host reference for tests): d = op(a) · op(b), batched.
void referenceColumnMajorGemm(const GemmMapping &mapping, const float *a,
                              const float *b, float *d);

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_GEMMMAPPING_H
