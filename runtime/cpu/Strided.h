//===- Strided.h - Walks of a shape with arbitrary strides ------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_CPU_STRIDED_H
#define TRELLIS_RUNTIME_CPU_STRIDED_H

#include <cstdint>
#include <vector>

namespace trellis::runtime::cpu {

/// The rows of `shape`'s innermost dimension: the product of the others
/// (one for a scalar), zero where `shape` has no elements.
inline int64_t stridedRows(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return 1;
  int64_t rows = shape.back() == 0 ? 0 : 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d)
    rows *= shape[d];
  return rows;
}

/// Calls `visit(outputOffset, inputOffset)` for the output elements of rows
/// [firstRow, lastRow) of the innermost dimension (row r holds output
/// offsets r * inner up to (r + 1) * inner; a scalar is one row of one),
/// where the input offset advances by `inputStrides` (one per output
/// dimension) from `inputBase`.
template <typename Visit>
void forEachStridedRows(const std::vector<int64_t> &shape,
                        const std::vector<int64_t> &inputStrides,
                        int64_t inputBase, int64_t firstRow, int64_t lastRow,
                        Visit visit) {
  if (firstRow >= lastRow)
    return;
  if (shape.empty()) {
    visit(0, inputBase);
    return;
  }
  size_t rank = shape.size();
  int64_t inner = shape[rank - 1], innerStride = inputStrides[rank - 1];
  // The outer index of the first row, and its input offset.
  std::vector<int64_t> index(rank, 0);
  int64_t offset = inputBase, rest = firstRow;
  for (size_t d = rank - 1; d-- > 0;) {
    index[d] = rest % shape[d];
    rest /= shape[d];
    offset += index[d] * inputStrides[d];
  }
  for (int64_t row = firstRow; row < lastRow; ++row) {
    int64_t base = row * inner;
    for (int64_t j = 0; j < inner; ++j)
      visit(base + j, offset + j * innerStride);
    for (size_t d = rank - 1; d-- > 0;) {
      ++index[d];
      offset += inputStrides[d];
      if (index[d] < shape[d])
        break;
      offset -= inputStrides[d] * shape[d];
      index[d] = 0;
    }
  }
}

/// forEachStridedRows over every output element, in order.
template <typename Visit>
void forEachStrided(const std::vector<int64_t> &shape,
                    const std::vector<int64_t> &inputStrides, int64_t inputBase,
                    Visit visit) {
  forEachStridedRows(shape, inputStrides, inputBase, 0, stridedRows(shape),
                     visit);
}

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_STRIDED_H
