//===- Layout.cpp - Reshape, transpose, slice, pad, concat, broadcast -----===//

#include "Kernels.h"

#include <type_traits>

#include <algorithm>
#include <cstring>
#include <limits>

namespace trellis::runtime::cpu {

namespace {

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

namespace {

/// sums[c] += x[r * stride + c] for rows r in order, c < count: a column
/// block of a bias gradient. Cloned for AVX-512 (picked at load time where
/// the CPU has it).
__attribute__((target_clones("avx512f", "default"))) void
addRows(const float *x, int64_t stride, int64_t rows, int64_t count,
        double *__restrict sums) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * stride;
    for (int64_t c = 0; c < count; ++c)
      sums[c] += row[c];
  }
}

} // namespace

Status runReduction(const KernelArgs &args) {
  const Tensor &in = args.in(0);
  Tensor &out = args.out(0);
  const std::vector<int64_t> &dims = args.instruction.ints("dims");
  const std::vector<int64_t> &shape = in.shape();
  // Output offset of each input element: reduced dimensions contribute 0.
  std::vector<int64_t> keptShape(shape);
  for (int64_t d : dims)
    keptShape[d] = 1;
  std::vector<int64_t> keptStrides = stridesOf(keptShape);
  for (int64_t d : dims)
    keptStrides[d] = 0;
  bool isMax = args.instruction.op == "reduce_max";
  float *y = out.f32();
  const float *x = in.f32();
  if (isMax) {
    std::fill(y, y + out.size(), -std::numeric_limits<float>::infinity());
    // Walk the input in order; the "input strides" here map to the output.
    forEachStrided(shape, keptStrides, 0,
                   [&](int64_t i, int64_t o) { y[o] = std::max(y[o], x[i]); });
    return Status::success();
  }
  // Sums accumulate in double: they are long (a bias gradient sums every
  // token) and their rounding should not depend on how they are split.
  std::vector<double> sums(out.size(), 0.0);
  // Leading dimensions reduced, trailing ones kept (a bias gradient): a
  // [rows, columns] view whose columns the threads share; each column
  // still adds its rows in order, as the walk below does.
  size_t leading = 0;
  while (leading < dims.size() &&
         dims[leading] == static_cast<int64_t>(leading))
    ++leading;
  int64_t columns = 1;
  for (size_t d = leading; d < shape.size(); ++d)
    columns *= shape[d];
  int64_t rows = columns > 0 ? in.size() / columns : 0;
  if (leading == dims.size() && leading < shape.size() && columns > 1 &&
      in.size() >= kParallelElements) {
    constexpr int64_t kColumnBlock = 64;
    int64_t blocks = (columns + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      int64_t first = block * kColumnBlock;
      addRows(x + first, columns, rows,
              std::min(columns - first, kColumnBlock), sums.data() + first);
    }
  } else {
    forEachStrided(shape, keptStrides, 0,
                   [&](int64_t i, int64_t o) { sums[o] += x[i]; });
  }
  double scale = 1.0;
  if (args.instruction.op == "reduce_mean") {
    int64_t count = 1;
    for (int64_t d : dims)
      count *= shape[d];
    scale = count ? 1.0 / count : 0.0;
  }
  for (int64_t i = 0; i < out.size(); ++i)
    y[i] = static_cast<float>(sums[i] * scale);
  return Status::success();
}

} // namespace trellis::runtime::cpu
