//===- Embedding.cpp - Embedding lookup and its gradient, rotary embedding -===//

#include "Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace trellis::runtime::cpu {

Status runEmbedding(const KernelArgs &args) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  const EmbeddingParameters &parameters =
      parametersOf<EmbeddingParameters>(args);
  if (!rowOf(args).gradient) {
    const Tensor &table = args.in(0), &ids = args.in(1);
    int64_t rows = table.shape()[0], width = table.shape()[1];
    // A vocabulary shard holds the rows at this rank's position.
    int64_t offset = parameters.vocabOffset + *position * rows;
    // Rows move as bytes (the result has the table's dtype; zero bits are
    // 0.0 in every float dtype).
    int64_t rowBytes = width * dtypeBytes(table.desc().dtype);
    char *out = static_cast<char *>(args.out(0).raw());
    const char *source = static_cast<const char *>(table.raw());
#pragma omp parallel for schedule(static) if (ids.size() * width >= kParallelElements)
    for (int64_t t = 0; t < ids.size(); ++t) {
      int64_t row = static_cast<int64_t>(ids.i32()[t]) - offset;
      if (row >= 0 && row < rows)
        std::memcpy(out + t * rowBytes, source + row * rowBytes, rowBytes);
      else
        std::memset(out + t * rowBytes, 0, rowBytes);
    }
    return Status::success();
  }
  // embedding_grad: scatter-add rows of the result gradient, but for the
  // padding row (an id of the full table; -1: none).
  const Tensor &ids = args.in(0), &grad = args.in(1);
  Tensor &out = args.out(0);
  int64_t rows = out.shape()[0], width = out.shape()[1];
  int64_t offset = parameters.vocabOffset + *position * rows;
  int64_t padding = parameters.paddingIndex;
  // The table's rows zeroed, then each thread adds every token's row to its
  // own block of columns, tokens in order: an element's sum has one order
  // whatever the threads.
  float *table = out.f32();
  int64_t total = out.size();
#pragma omp parallel for schedule(static) if (total >= kParallelElements)
  for (int64_t row = 0; row < rows; ++row)
    std::fill(table + row * width, table + (row + 1) * width, 0.0f);
  constexpr int64_t kColumnBlock = 64;
  int64_t blocks = (width + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (ids.size() * width >= kParallelElements)
  for (int64_t block = 0; block < blocks; ++block) {
    int64_t first = block * kColumnBlock,
            last = std::min(width, first + kColumnBlock);
    for (int64_t t = 0; t < ids.size(); ++t) {
      int64_t id = ids.i32()[t];
      int64_t row = id - offset;
      if (row < 0 || row >= rows || id == padding)
        continue;
      float *dst = table + row * width;
      const float *src = grad.f32() + t * width;
      for (int64_t i = first; i < last; ++i)
        dst[i] += src[i];
    }
  }
  return Status::success();
}

Status runRope(const KernelArgs &args) {
  const Tensor &in = args.in(0);
  const std::vector<int64_t> &shape = in.shape();
  int64_t batch = shape[0], seq = shape[1], heads = shape[2], dim = shape[3];
  int64_t half = dim / 2;
  const PositionParameters &parameters = parametersOf<PositionParameters>(args);
  const std::vector<double> &frequencies = parameters.frequencies;
  double sign = parameters.inverse ? -1.0 : 1.0;
  // A piece of the sequence (split over `axes`) starts at its place.
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  std::vector<int64_t> positions = sequencePositions(
      *position * seq, seq, seq * shardCount(args), parameters.chunks);
  std::vector<float> cosines(half), sines(half);
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      double angle = sign * double(positions[s]) * frequencies[i];
      cosines[i] = static_cast<float>(std::cos(angle));
      sines[i] = static_cast<float>(std::sin(angle));
    }
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        int64_t base = ((b * seq + s) * heads + h) * dim;
        const float *x = in.f32() + base;
        float *y = args.out(0).f32() + base;
        for (int64_t i = 0; i < half; ++i) {
          // The pair (first, second): (2i, 2i + 1) or (i, i + half).
          int64_t first = parameters.interleaved ? 2 * i : i;
          int64_t second = parameters.interleaved ? 2 * i + 1 : i + half;
          float x1 = x[first], x2 = x[second];
          y[first] = x1 * cosines[i] - x2 * sines[i];
          y[second] = x2 * cosines[i] + x1 * sines[i];
        }
      }
  }
  return Status::success();
}

void registerEmbeddingKernels(KernelTable &table) {
  table.addFamily(OpFamily::Embedding, runEmbedding);
  table.addMember(PositionKind::Rope, runRope);
}

} // namespace trellis::runtime::cpu
