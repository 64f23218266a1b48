//===- GemmMapping.cpp - A matmul instruction as a cuBLASLt call ----------===//

#include "GemmMapping.h"

#include "trellis/Runtime/OpShapes.h"

namespace trellis::runtime::cuda {

GemmMapping mapMatmul(const std::vector<int64_t> &lhs,
                      const std::vector<int64_t> &rhs, bool transposeLhs,
                      bool transposeRhs) {
  MatmulSizes sizes = matmulSizes(lhs, rhs, transposeLhs, transposeRhs);
  int64_t m = sizes.m, k = sizes.k, n = sizes.n, batch = sizes.batch;
  bool sharedRhs = sizes.sharedRhs;
  GemmMapping mapping;
  // One product over every batch's rows when they lie one after another.
  if (sharedRhs && !transposeLhs) {
    m *= batch;
    batch = 1;
  }
  mapping.rows = n;
  mapping.columns = m;
  mapping.k = k;
  mapping.batch = batch;
  // A: the rhs. Row-major [k, n] is column-major n × k (leading n);
  // transposed, row-major [n, k] is column-major k × n (leading k).
  mapping.a.transposed = transposeRhs;
  mapping.a.rows = transposeRhs ? k : n;
  mapping.a.columns = transposeRhs ? n : k;
  mapping.a.leading = mapping.a.rows;
  mapping.a.batchStride = sharedRhs ? 0 : k * n;
  // B: the lhs. Row-major [m, k] is column-major k × m (leading k);
  // transposed, row-major [k, m] is column-major m × k (leading m).
  mapping.b.transposed = transposeLhs;
  mapping.b.rows = transposeLhs ? m : k;
  mapping.b.columns = transposeLhs ? k : m;
  mapping.b.leading = mapping.b.rows;
  mapping.b.batchStride = m * k;
  mapping.resultLeading = n;
  mapping.resultBatchStride = m * n;
  return mapping;
}

void referenceColumnMajorGemm(const GemmMapping &mapping, const float *a,
                              const float *b, float *d) {
  // Element (i, j) of a column-major matrix with leading dimension ld is at
  // i + j * ld; op(X)(i, j) is X(j, i) when transposed.
  auto at = [](const GemmOperand &operand, const float *base, int64_t i,
               int64_t j) {
    return operand.transposed ? base[j + i * operand.leading]
                              : base[i + j * operand.leading];
  };
  for (int64_t batch = 0; batch < mapping.batch; ++batch) {
    const float *aBatch = a + batch * mapping.a.batchStride;
    const float *bBatch = b + batch * mapping.b.batchStride;
    float *dBatch = d + batch * mapping.resultBatchStride;
    for (int64_t j = 0; j < mapping.columns; ++j)
      for (int64_t i = 0; i < mapping.rows; ++i) {
        double sum = 0;
        for (int64_t p = 0; p < mapping.k; ++p)
          sum += double(at(mapping.a, aBatch, i, p)) *
                 double(at(mapping.b, bBatch, p, j));
        dBatch[i + j * mapping.resultLeading] = static_cast<float>(sum);
      }
  }
}

} // namespace trellis::runtime::cuda
