//===- CrossEntropy.cpp - Cross-entropy and its gradient ------------------===//
//
// One pass over each logits row (CrossEntropyRows.cpp: online maximum and
// sum of exponentials, vectorized), the probabilities never stored; the
// gradient is written in one more vectorized pass. Rows are split over
// the device's OpenMP threads; the loss adds the rows' terms in row order,
// so the result does not depend on the thread count. bf16 or f16 logits
// are widened a row at a time and the gradient rounded from an fp32 row
// (FloatRows.h): the values of an fp32 copy cast back, without the copies.
// With the classes split over mesh axes (vocabulary parallelism), each
// rank's row maxima and sums combine across the group: the maximum first,
// then the sums rescaled to it.
//
//===----------------------------------------------------------------------===//

#include "CrossEntropyRows.h"
#include "FloatRows.h"
#include "Kernels.h"

#include <cmath>
#include <limits>

namespace trellis::runtime::cpu {

Status runCrossEntropy(const KernelArgs &args) {
  const Tensor &logits = args.in(0), &targets = args.in(1);
  int64_t classes = logits.shape().back();
  int64_t rows = targets.size();
  int64_t normalizer = parametersOf<LossParameters>(args).normalizer;
  double scale = 1.0 / static_cast<double>(normalizer ? normalizer : rows);
  bool isGrad = rowOf(args).gradient;
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
  const int32_t *ids = targets.i32();
  for (int64_t r = 0; r < rows; ++r)
    if (ids[r] < 0 || ids[r] >= vocabulary)
      return Status::error("target id " + std::to_string(ids[r]) +
                           " at position " + std::to_string(r) +
                           " is outside the vocabulary [0, " +
                           std::to_string(vocabulary) + ")");

  // Row maxima, sums of exponentials and target logits.
  std::vector<float> maxima(rows, -std::numeric_limits<float>::infinity()),
      picked(rows, 0.0f);
  std::vector<double> sums(rows, 0.0);
#pragma omp parallel if (rows > 1)
  {
    FloatRows x(logits, classes);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (classes == 0)
        continue;
      const float *row = x.read(r);
      RowStats stats = rowStats(row, classes);
      maxima[r] = stats.max;
      sums[r] = stats.sum;
      if (ids[r] >= offset && ids[r] < offset + classes)
        picked[r] = row[ids[r] - offset];
    }
  }
  if (split) {
    // The group's maximum, each rank's sum rescaled to it; the sums travel
    // as float pairs (high part, remainder), so the combined sum keeps
    // double precision, as on one rank.
    std::vector<float> global = maxima;
    TRELLIS_RETURN_IF_ERROR(args.comm->allReduce(
        args.axes, global.data(), rows, DType::F32, ReduceKind::Max));
    std::vector<float> pairs(2 * rows);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = sums[r] * std::exp(double(maxima[r]) - double(global[r]));
      pairs[r] = static_cast<float>(sum);
      pairs[rows + r] = static_cast<float>(sum - double(pairs[r]));
    }
    TRELLIS_RETURN_IF_ERROR(args.comm->allReduce(
        args.axes, pairs.data(), 2 * rows, DType::F32, ReduceKind::Sum));
    for (int64_t r = 0; r < rows; ++r) {
      sums[r] = double(pairs[r]) + double(pairs[rows + r]);
      maxima[r] = global[r];
    }
    TRELLIS_RETURN_IF_ERROR(
        args.comm->allReduce(args.axes, picked.data(), rows, DType::F32,
                             ReduceKind::Sum));
  }

  if (!isGrad) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r)
      total += maxima[r] + std::log(sums[r]) - picked[r];
    args.out(0).f32()[0] = static_cast<float>(total * scale);
    return Status::success();
  }
  double factor = upstream * scale;
#pragma omp parallel if (rows > 1)
  {
    FloatRows x(logits, classes), dx(args.out(0), classes);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (classes == 0)
        continue;
      float *row = dx.write(r);
      softmaxRowScaled(x.read(r), classes, maxima[r] + std::log(sums[r]),
                       factor, row);
      if (ids[r] >= offset && ids[r] < offset + classes)
        row[ids[r] - offset] -= static_cast<float>(factor);
      dx.store(r);
    }
  }
  return Status::success();
}

void registerCrossEntropyKernels(KernelTable &table) {
  table.addFamily(OpFamily::Loss, runCrossEntropy);
}

} // namespace trellis::runtime::cpu
