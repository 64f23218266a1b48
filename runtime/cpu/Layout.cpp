//===- Layout.cpp - Reshape, transpose, slice, pad, concat, broadcast -----===//

#include "Kernels.h"
#include "Strided.h"

#include <type_traits>

#include <algorithm>
#include <cstring>

namespace trellis::runtime::cpu {

namespace {

/// Moves elements between `in` and `out` along a strided walk of `shape`
/// (forEachStridedRows): with `gather`, out[dense] = in[strided]; else
/// out[strided] = in[dense]. Elements are moved as unsigned integers of
/// their width, without being read as numbers, so every dtype goes alike.
/// Rows of the walk split over the threads (each element is written once).
void moveStrided(const Tensor &in, Tensor &out,
                 const std::vector<int64_t> &shape,
                 const std::vector<int64_t> &strides, int64_t base,
                 bool gather) {
  int64_t rows = stridedRows(shape);
  int64_t inner = shape.empty() ? 1 : std::max<int64_t>(1, shape.back());
  // Pieces of about kParallelElements / 4 elements, whole rows each.
  int64_t pieceRows = std::max<int64_t>(1, kParallelElements / 4 / inner);
  int64_t pieces = (rows + pieceRows - 1) / pieceRows;
  auto move = [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T *x = static_cast<const T *>(in.raw());
    T *y = static_cast<T *>(out.raw());
#pragma omp parallel for schedule(static) if (rows * inner >= kParallelElements)
    for (int64_t piece = 0; piece < pieces; ++piece) {
      int64_t first = piece * pieceRows,
              last = std::min(rows, first + pieceRows);
      if (gather)
        forEachStridedRows(shape, strides, base, first, last,
                           [&](int64_t dense, int64_t strided) {
                             y[dense] = x[strided];
                           });
      else
        forEachStridedRows(shape, strides, base, first, last,
                           [&](int64_t dense, int64_t strided) {
                             y[strided] = x[dense];
                           });
    }
  };
  if (dtypeBytes(in.desc().dtype) == 2)
    move(static_cast<uint16_t *>(nullptr));
  else
    move(static_cast<uint32_t *>(nullptr));
}

/// Calls `fn(first, count)` for the 64 KiB chunks of `bytes` bytes, over
/// the threads where there are 16 chunks or more (a large copy is bound by
/// memory bandwidth, which one core does not saturate).
template <typename Fn> void forEachChunk(int64_t bytes, Fn fn) {
  constexpr int64_t kChunkBytes = int64_t(1) << 16;
  int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
#pragma omp parallel for schedule(static) if (chunks >= 16)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t first = c * kChunkBytes;
    fn(first, std::min(kChunkBytes, bytes - first));
  }
}

void parallelCopy(void *target, const void *source, int64_t bytes) {
  char *to = static_cast<char *>(target);
  const char *from = static_cast<const char *>(source);
  forEachChunk(bytes, [&](int64_t first, int64_t count) {
    std::memcpy(to + first, from + first, count);
  });
}

void parallelZero(void *target, int64_t bytes) {
  char *to = static_cast<char *>(target);
  forEachChunk(bytes, [&](int64_t first, int64_t count) {
    std::memset(to + first, 0, count);
  });
}

void transpose(const Tensor &in, Tensor &out,
               const std::vector<int64_t> &perm) {
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape());
  std::vector<int64_t> strides;
  for (int64_t d : perm)
    strides.push_back(inStrides[d]);
  moveStrided(in, out, out.shape(), strides, 0, /*gather=*/true);
}

void slice(const Tensor &in, Tensor &out, const std::vector<int64_t> &offsets) {
  std::vector<int64_t> strides = rowMajorStrides(in.shape());
  int64_t base = 0;
  for (size_t d = 0; d < offsets.size(); ++d)
    base += offsets[d] * strides[d];
  moveStrided(in, out, out.shape(), strides, base, /*gather=*/true);
}

void pad(const Tensor &in, Tensor &out, const std::vector<int64_t> &low) {
  // Zero bits are 0.0 in every float dtype.
  parallelZero(out.raw(), out.bytes());
  // Write the input into the box of the output that starts at `low`: the
  // output offsets of that box advance with the output's strides.
  std::vector<int64_t> outStrides = rowMajorStrides(out.shape());
  int64_t base = 0;
  for (size_t d = 0; d < low.size(); ++d)
    base += low[d] * outStrides[d];
  moveStrided(in, out, in.shape(), outStrides, base, /*gather=*/false);
}

void concat(const KernelArgs &args, int64_t dim) {
  Tensor &out = args.out(0);
  const std::vector<int64_t> &shape = out.shape();
  int64_t width = dtypeBytes(out.desc().dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  int64_t outRow = shape[dim] * inner * width;
  int64_t offset = 0;
  char *y = static_cast<char *>(out.raw());
  for (size_t i = 0; i < args.instruction.inputs.size(); ++i) {
    const Tensor &in = args.in(i);
    const char *x = static_cast<const char *>(in.raw());
    int64_t row = in.shape()[dim] * inner * width;
    if (outer == 1)
      parallelCopy(y + offset, x, row);
    else
#pragma omp parallel for schedule(static) if (outer * row >= 4 * kParallelElements)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(y + o * outRow + offset, x + o * row, row);
    offset += row;
  }
}

void broadcastTo(const Tensor &in, Tensor &out) {
  moveStrided(in, out, out.shape(),
              broadcastStrides(in.shape(), out.shape().size()), 0,
              /*gather=*/true);
}

} // namespace

Status runLayout(const KernelArgs &args) {
  const LayoutParameters &parameters = parametersOf<LayoutParameters>(args);
  switch (*rowOf(args).memberAs<LayoutKind>()) {
  case LayoutKind::Reshape:
    // A reshape's result usually shares its operand's bytes (the executor's
    // arena plan): then there is nothing to move.
    if (args.out(0).raw() != args.in(0).raw())
      parallelCopy(args.out(0).raw(), args.in(0).raw(), args.in(0).bytes());
    break;
  case LayoutKind::Transpose:
    transpose(args.in(0), args.out(0), parameters.permutation);
    break;
  case LayoutKind::Slice:
    slice(args.in(0), args.out(0), parameters.offsets);
    break;
  case LayoutKind::Pad:
    pad(args.in(0), args.out(0), parameters.low);
    break;
  case LayoutKind::Concat:
    concat(args, parameters.dim);
    break;
  case LayoutKind::BroadcastTo:
    broadcastTo(args.in(0), args.out(0));
    break;
  }
  return Status::success();
}

void registerLayoutKernels(KernelTable &table) {
  table.addFamily(OpFamily::Layout, runLayout);
}

} // namespace trellis::runtime::cpu
