//===- Embedding.cpp - Embedding lookup, rotary embedding, cross-entropy --===//

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
  if (args.instruction.op == "embedding") {
    const Tensor &table = args.in(0), &ids = args.in(1);
    int64_t rows = table.shape()[0], width = table.shape()[1];
    // A vocabulary shard holds the rows at this rank's position.
    int64_t offset =
        args.instruction.integer("vocab_offset") + *position * rows;
    float *out = args.out(0).f32();
    for (int64_t t = 0; t < ids.size(); ++t) {
      int64_t row = static_cast<int64_t>(ids.i32()[t]) - offset;
      if (row >= 0 && row < rows)
        std::memcpy(out + t * width, table.f32() + row * width,
                    width * sizeof(float));
      else
        std::fill(out + t * width, out + (t + 1) * width, 0.0f);
    }
    return Status::success();
  }
  // embedding_grad: scatter-add rows of the result gradient.
  const Tensor &ids = args.in(0), &grad = args.in(1);
  Tensor &out = args.out(0);
  int64_t rows = out.shape()[0], width = out.shape()[1];
  int64_t offset = args.instruction.integer("vocab_offset") + *position * rows;
  std::fill(out.f32(), out.f32() + out.size(), 0.0f);
  for (int64_t t = 0; t < ids.size(); ++t) {
    int64_t row = static_cast<int64_t>(ids.i32()[t]) - offset;
    if (row < 0 || row >= rows)
      continue;
    float *dst = out.f32() + row * width;
    const float *src = grad.f32() + t * width;
    for (int64_t i = 0; i < width; ++i)
      dst[i] += src[i];
  }
  return Status::success();
}

Status runRope(const KernelArgs &args) {
  const Tensor &in = args.in(0);
  const std::vector<int64_t> &shape = in.shape();
  int64_t batch = shape[0], seq = shape[1], heads = shape[2], dim = shape[3];
  int64_t half = dim / 2;
  const std::vector<double> &frequencies =
      args.instruction.reals("frequencies");
  double sign = args.instruction.flag("inverse") ? -1.0 : 1.0;
  // A piece of the sequence (split over `axes`) starts at its place.
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  std::vector<int64_t> positions =
      sequencePositions(*position * seq, seq, seq * shardCount(args),
                        args.instruction.integer("chunks"));
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
          float x1 = x[i], x2 = x[i + half];
          y[i] = x1 * cosines[i] - x2 * sines[i];
          y[i + half] = x2 * cosines[i] + x1 * sines[i];
        }
      }
  }
  return Status::success();
}

Status runCrossEntropy(const KernelArgs &args) {
  const Tensor &logits = args.in(0), &targets = args.in(1);
  int64_t classes = logits.shape().back();
  int64_t rows = targets.size();
  int64_t normalizer = args.instruction.integer("normalizer");
  double scale = 1.0 / static_cast<double>(normalizer ? normalizer : rows);
  bool isGrad = args.instruction.op == "cross_entropy_grad";
  double upstream = isGrad ? args.in(2).f32()[0] : 1.0;
  // With the classes split over `axes`, this rank holds classes
  // [offset, offset + classes) of the vocabulary.
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  bool split = !args.axes.empty();
  int64_t offset = *position * classes;
  int64_t vocabulary =
      split ? classes * args.comm->groupSize(args.axes) : classes;

  // Row maxima, sums of exponentials and target logits; over the whole
  // vocabulary when it is split (three reductions across the group).
  std::vector<float> maxima(rows), picked(rows, 0.0f);
  std::vector<double> sums(rows);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t target = targets.i32()[r];
    if (target < 0 || target >= vocabulary)
      return Status::error("target id " + std::to_string(target) +
                           " at position " + std::to_string(r) +
                           " is outside the vocabulary [0, " +
                           std::to_string(vocabulary) + ")");
    const float *x = logits.f32() + r * classes;
    maxima[r] = classes ? *std::max_element(x, x + classes)
                        : -std::numeric_limits<float>::infinity();
    if (target >= offset && target < offset + classes)
      picked[r] = x[target - offset];
  }
  if (split)
    TRELLIS_RETURN_IF_ERROR(
        args.comm->allReduce(args.axes, maxima.data(), rows, DType::F32,
                             ReduceKind::Max));
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = logits.f32() + r * classes;
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(double(x[c]) - maxima[r]);
    sums[r] = sum;
  }
  if (split) {
    // The sums travel as float pairs (high part, remainder), so the
    // combined sum keeps double precision, as on one rank.
    std::vector<float> pairs(2 * rows);
    for (int64_t r = 0; r < rows; ++r) {
      pairs[r] = static_cast<float>(sums[r]);
      pairs[rows + r] = static_cast<float>(sums[r] - double(pairs[r]));
    }
    TRELLIS_RETURN_IF_ERROR(args.comm->allReduce(
        args.axes, pairs.data(), 2 * rows, DType::F32, ReduceKind::Sum));
    for (int64_t r = 0; r < rows; ++r)
      sums[r] = double(pairs[r]) + double(pairs[rows + r]);
    TRELLIS_RETURN_IF_ERROR(
        args.comm->allReduce(args.axes, picked.data(), rows, DType::F32,
                             ReduceKind::Sum));
  }

  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double logSumExp = maxima[r] + std::log(sums[r]);
    if (!isGrad) {
      total += logSumExp - picked[r];
      continue;
    }
    const float *x = logits.f32() + r * classes;
    float *dx = args.out(0).f32() + r * classes;
    double factor = upstream * scale;
    for (int64_t c = 0; c < classes; ++c)
      dx[c] = static_cast<float>(std::exp(double(x[c]) - logSumExp) * factor);
    int64_t target = targets.i32()[r];
    if (target >= offset && target < offset + classes)
      dx[target - offset] -= static_cast<float>(factor);
  }
  if (!isGrad)
    args.out(0).f32()[0] = static_cast<float>(total * scale);
  return Status::success();
}

} // namespace trellis::runtime::cpu
