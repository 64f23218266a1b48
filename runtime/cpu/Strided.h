//===- Strided.h - Walks of a shape with arbitrary strides ------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_CPU_STRIDED_H
#define TRELLIS_RUNTIME_CPU_STRIDED_H

#include <cstdint>
#include <vector>

namespace trellis::runtime::cpu {

/// Calls `visit(outputOffset, inputOffset)` for every output element, where
/// the input offset advances by `inputStrides` (one per output dimension)
/// from `inputBase`.
template <typename Visit>
void forEachStrided(const std::vector<int64_t> &shape,
                    const std::vector<int64_t> &inputStrides, int64_t inputBase,
                    Visit visit) {
  size_t rank = shape.size();
  int64_t total = 1;
  for (int64_t size : shape)
    total *= size;
  if (total == 0)
    return;
  if (rank == 0) {
    visit(0, inputBase);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  int64_t inner = shape[rank - 1], innerStride = inputStrides[rank - 1];
  int64_t offset = inputBase;
  for (int64_t base = 0; base < total; base += inner) {
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

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_STRIDED_H
