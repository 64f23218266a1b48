//===- Reduction.cpp - reduce_sum, reduce_mean and reduce_max -------------===//
//
// Sums accumulate in double: they are long (a bias gradient sums every
// token) and their rounding should not depend on how they are split. A
// reduction of leading dimensions (a bias gradient) views its input as
// [rows, columns] and cuts it into tiles that the shape alone fixes:
// chunks of rows by blocks of columns. A tile adds its rows in order into
// its chunk's partial sums, and the partials add in chunk order, so the
// threads share any shape and the result does not depend on their count.
// Tiles widen 16-bit rows a block at a time. Other reductions walk the
// input in order (16-bit inputs through an fp32 copy). 16-bit results are
// rounded once from the fp32 result.
//
//===----------------------------------------------------------------------===//

#include "FloatRows.h"
#include "Kernels.h"
#include "Strided.h"

#include <algorithm>
#include <limits>
#include <memory>

namespace trellis::runtime::cpu {

namespace {

/// Rows of a tile (of many, the chunks grow so that the partial sums stay
/// within kMaxPartials doubles, or kMaxChunks chunks).
constexpr int64_t kChunkRows = 64;
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kMaxPartials = int64_t(1) << 20;
/// Columns of a tile: its partial sums and a widened row stay in L1.
constexpr int64_t kBlockColumns = 512;

/// sums[c] += x[r * stride + c] for rows r in order, c < count. Cloned for
/// AVX-512 (picked at load time where the CPU has it).
__attribute__((target_clones("avx512f", "default"))) void
addRows(const float *x, int64_t stride, int64_t rows, int64_t count,
        double *__restrict sums) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * stride;
    for (int64_t c = 0; c < count; ++c)
      sums[c] += row[c];
  }
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The tiles of a [rows, columns] sum.
struct SumTiles {
  int64_t chunkRows = kChunkRows, chunks, blocks;

  SumTiles(int64_t rows, int64_t columns) {
    int64_t limit = std::clamp<int64_t>(kMaxPartials / columns, 1, kMaxChunks);
    chunks = ceilDiv(rows, chunkRows);
    if (chunks > limit) {
      chunkRows = ceilDiv(rows, limit);
      chunks = ceilDiv(rows, chunkRows);
    }
    blocks = ceilDiv(columns, kBlockColumns);
  }
};

/// totals[c] = the sum over r of in[r, c], `in` viewed as [rows, columns]
/// (columns > 0).
void sumRows(const Tensor &in, int64_t rows, int64_t columns,
             double *totals) {
  SumTiles tiles(rows, columns);
  std::unique_ptr<double[]> partials(new double[tiles.chunks * columns]);
  DType dtype = in.desc().dtype;
  bool narrow = isNarrowDType(dtype);
  const float *x = in.f32();
  const uint16_t *bits = static_cast<const uint16_t *>(in.raw());
  int64_t count = tiles.chunks * tiles.blocks;
#pragma omp parallel for schedule(static) if (in.size() >= kParallelElements)
  for (int64_t tile = 0; tile < count; ++tile) {
    int64_t chunk = tile / tiles.blocks, block = tile % tiles.blocks;
    int64_t first = block * kBlockColumns;
    int64_t width = std::min(kBlockColumns, columns - first);
    int64_t begin = chunk * tiles.chunkRows;
    int64_t end = std::min(rows, begin + tiles.chunkRows);
    double *sums = partials.get() + chunk * columns + first;
    std::fill(sums, sums + width, 0.0);
    if (!narrow) {
      addRows(x + begin * columns + first, columns, end - begin, width, sums);
      continue;
    }
    float row[kBlockColumns];
    for (int64_t r = begin; r < end; ++r) {
      widenValues(dtype, bits + r * columns + first, row, width);
      addRows(row, 0, 1, width, sums);
    }
  }
#pragma omp parallel for schedule(static) if (tiles.chunks * columns >= kParallelElements)
  for (int64_t block = 0; block < tiles.blocks; ++block) {
    int64_t first = block * kBlockColumns;
    int64_t last = std::min(columns, first + kBlockColumns);
    std::fill(totals + first, totals + last, 0.0);
    for (int64_t chunk = 0; chunk < tiles.chunks; ++chunk) {
      const double *sums = partials.get() + chunk * columns;
      for (int64_t c = first; c < last; ++c)
        totals[c] += sums[c];
    }
  }
}

} // namespace

Status runReduction(const KernelArgs &args) {
  const Tensor &in = args.in(0);
  Tensor &out = args.out(0);
  const std::vector<int64_t> &dims =
      parametersOf<ReductionParameters>(args).dims;
  const std::vector<int64_t> &shape = in.shape();
  // Output offset of each input element: reduced dimensions contribute 0.
  std::vector<int64_t> keptShape(shape);
  for (int64_t d : dims)
    keptShape[d] = 1;
  std::vector<int64_t> keptStrides = rowMajorStrides(keptShape);
  for (int64_t d : dims)
    keptStrides[d] = 0;
  std::vector<float> result(out.size());
  ReductionFunction kind = *rowOf(args).memberAs<ReductionFunction>();
  if (kind == ReductionFunction::Max) {
    FloatValues x(in);
    std::fill(result.begin(), result.end(),
              -std::numeric_limits<float>::infinity());
    // Walk the input in order; the "input strides" here map to the output.
    forEachStrided(shape, keptStrides, 0, [&](int64_t i, int64_t o) {
      result[o] = std::max(result[o], x.data()[i]);
    });
    storeValues(result.data(), out);
    return Status::success();
  }
  std::vector<double> sums(out.size(), 0.0);
  // Leading dimensions reduced, trailing ones kept: a [rows, columns] view.
  size_t leading = 0;
  while (leading < dims.size() &&
         dims[leading] == static_cast<int64_t>(leading))
    ++leading;
  int64_t columns = 1;
  for (size_t d = leading; d < shape.size(); ++d)
    columns *= shape[d];
  if (leading == dims.size() && leading < shape.size() && columns > 1) {
    sumRows(in, in.size() / columns, columns, sums.data());
  } else {
    FloatValues x(in);
    forEachStrided(shape, keptStrides, 0,
                   [&](int64_t i, int64_t o) { sums[o] += x.data()[i]; });
  }
  double scale = 1.0;
  if (kind == ReductionFunction::Mean) {
    int64_t count = 1;
    for (int64_t d : dims)
      count *= shape[d];
    scale = count ? 1.0 / count : 0.0;
  }
  for (int64_t i = 0; i < out.size(); ++i)
    result[i] = static_cast<float>(sums[i] * scale);
  storeValues(result.data(), out);
  return Status::success();
}

void registerReductionKernels(KernelTable &table) {
  table.addFamily(OpFamily::Reduction, runReduction);
}

} // namespace trellis::runtime::cpu
