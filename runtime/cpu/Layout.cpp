//===- Layout.cpp - Reshape, transpose, slice, pad, concat, broadcast -----===//

#include "Kernels.h"
#include "Strided.h"

#include <type_traits>

#include <algorithm>
#include <cstring>

namespace trellis::runtime::cpu {

namespace {

/// Moves elements between `in` and `out` along a strided walk of `shape`
/// (forEachStrided): with `gather`, out[dense] = in[strided]; else
/// out[strided] = in[dense]. Elements are moved as unsigned integers of
/// their width, without being read as numbers, so every dtype goes alike.
void moveStrided(const Tensor &in, Tensor &out,
                 const std::vector<int64_t> &shape,
                 const std::vector<int64_t> &strides, int64_t base,
                 bool gather) {
  auto move = [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T *x = static_cast<const T *>(in.raw());
    T *y = static_cast<T *>(out.raw());
    if (gather)
      forEachStrided(shape, strides, base,
                     [&](int64_t dense, int64_t strided) { y[dense] = x[strided]; });
    else
      forEachStrided(shape, strides, base,
                     [&](int64_t dense, int64_t strided) { y[strided] = x[dense]; });
  };
  if (dtypeBytes(in.desc().dtype) == 2)
    move(static_cast<uint16_t *>(nullptr));
  else
    move(static_cast<uint32_t *>(nullptr));
}

void transpose(const Tensor &in, Tensor &out,
               const std::vector<int64_t> &perm) {
  std::vector<int64_t> inStrides = stridesOf(in.shape());
  std::vector<int64_t> strides;
  for (int64_t d : perm)
    strides.push_back(inStrides[d]);
  moveStrided(in, out, out.shape(), strides, 0, /*gather=*/true);
}

void slice(const Tensor &in, Tensor &out, const std::vector<int64_t> &offsets) {
  std::vector<int64_t> strides = stridesOf(in.shape());
  int64_t base = 0;
  for (size_t d = 0; d < offsets.size(); ++d)
    base += offsets[d] * strides[d];
  moveStrided(in, out, out.shape(), strides, base, /*gather=*/true);
}

void pad(const Tensor &in, Tensor &out, const std::vector<int64_t> &low) {
  // Zero bits are 0.0 in every float dtype.
  std::memset(out.raw(), 0, out.bytes());
  // Write the input into the box of the output that starts at `low`: the
  // output offsets of that box advance with the output's strides.
  std::vector<int64_t> outStrides = stridesOf(out.shape());
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
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(y + o * outRow + offset, x + o * row, row);
    offset += row;
  }
}

void broadcastTo(const Tensor &in, Tensor &out) {
  size_t rank = out.shape().size();
  std::vector<int64_t> own = stridesOf(in.shape());
  std::vector<int64_t> strides(rank, 0);
  size_t lead = rank - in.shape().size();
  for (size_t d = 0; d < in.shape().size(); ++d)
    strides[lead + d] = in.shape()[d] == 1 ? 0 : own[d];
  moveStrided(in, out, out.shape(), strides, 0, /*gather=*/true);
}

/// memcpy in chunks over the threads (a large copy is bound by memory
/// bandwidth, which one core does not saturate).
void parallelCopy(void *target, const void *source, int64_t bytes) {
  constexpr int64_t kChunkBytes = int64_t(1) << 16;
  int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  char *to = static_cast<char *>(target);
  const char *from = static_cast<const char *>(source);
#pragma omp parallel for schedule(static) if (bytes >= 16 * kChunkBytes)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t first = c * kChunkBytes;
    std::memcpy(to + first, from + first,
                std::min(kChunkBytes, bytes - first));
  }
}

} // namespace

Status runLayout(const KernelArgs &args) {
  const std::string &op = args.instruction.op;
  if (op == "reshape") {
    // A reshape's result usually shares its operand's bytes (the executor's
    // arena plan): then there is nothing to move.
    if (args.out(0).raw() != args.in(0).raw())
      parallelCopy(args.out(0).raw(), args.in(0).raw(), args.in(0).bytes());
  }
  else if (op == "transpose")
    transpose(args.in(0), args.out(0), args.instruction.ints("permutation"));
  else if (op == "slice")
    slice(args.in(0), args.out(0), args.instruction.ints("offsets"));
  else if (op == "pad")
    pad(args.in(0), args.out(0), args.instruction.ints("low"));
  else if (op == "concat")
    concat(args, args.instruction.integer("dim"));
  else
    broadcastTo(args.in(0), args.out(0));
  return Status::success();
}

} // namespace trellis::runtime::cpu
