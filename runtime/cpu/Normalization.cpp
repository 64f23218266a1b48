//===- Normalization.cpp - Softmax, LayerNorm, RMSNorm and gradients ------===//
//
// Row statistics accumulate in double for accuracy; every op works on rows
// of the last dimension, the rows split over the device's OpenMP threads
// (weight gradients through fixed row chunks: thread-count independent).
// 16-bit operands are widened a row at a time (FloatRows.h).
//
//===----------------------------------------------------------------------===//

#include "FloatRows.h"
#include "Kernels.h"
#include "SoftmaxRows.h"

#include <algorithm>
#include <cmath>

namespace trellis::runtime::cpu {

void softmaxRow(const float *x, float *y, int64_t n) {
  if (n == 0)
    return;
  double sum = expShifted(x, y, n, rowMax(x, n));
  float inverse = static_cast<float>(1.0 / sum);
  for (int64_t c = 0; c < n; ++c)
    y[c] *= inverse;
}

namespace {

void softmax(const Tensor &in, Tensor &out) {
  int64_t cols = in.shape().empty() ? 1 : in.shape().back();
  int64_t rows = cols ? in.size() / cols : 0;
#pragma omp parallel
  {
    FloatRows x(in, cols), y(out, cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      softmaxRow(x.read(r), y.write(r), cols);
      y.store(r);
    }
  }
}

void softmaxGrad(const Tensor &result, const Tensor &grad, Tensor &out) {
  int64_t cols = result.shape().empty() ? 1 : result.shape().back();
  int64_t rows = cols ? result.size() / cols : 0;
#pragma omp parallel
  {
    FloatRows results(result, cols), grads(grad, cols), dxs(out, cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float *y = results.read(r), *dy = grads.read(r);
      float *dx = dxs.write(r);
      float dot = static_cast<float>(rowDot(y, dy, cols));
      for (int64_t c = 0; c < cols; ++c)
        dx[c] = y[c] * (dy[c] - dot);
      dxs.store(r);
    }
  }
}

/// Per-feature sums over rows (norm weight gradients) that threads can
/// share: rows fall into fixed chunks of kRows; a thread takes whole
/// chunks, sums each chunk's rows in order into the chunk's own partial,
/// and the partials add in chunk order. The result does not depend on the
/// thread count.
class RowChunks {
public:
  static constexpr int64_t kRows = 32;

  RowChunks(int64_t rows, int64_t features, int sums)
      : rows_(rows), features_(features), chunks_((rows + kRows - 1) / kRows),
        sums_(sums), partials_(chunks_ * sums * features, 0.0) {}

  int64_t count() const { return chunks_; }
  int64_t first(int64_t chunk) const { return chunk * kRows; }
  int64_t end(int64_t chunk) const {
    return std::min(rows_, (chunk + 1) * kRows);
  }

  /// Sum `which`'s partial for the chunk of row `row`.
  double *partial(int64_t row, int which) {
    return partials_.data() + ((row / kRows) * sums_ + which) * features_;
  }

  /// out = the chunks' partials of sum `which`, added in chunk order.
  void sum(int which, Tensor &out) const {
    std::vector<float> totals(features_);
    for (int64_t i = 0; i < features_; ++i) {
      double total = 0;
      for (int64_t c = 0; c < count(); ++c)
        total += partials_[(c * sums_ + which) * features_ + i];
      totals[i] = static_cast<float>(total);
    }
    storeValues(totals.data(), out);
  }

private:
  int64_t rows_, features_, chunks_;
  int sums_;
  std::vector<double> partials_;
};

/// The per-row loops below are cloned for AVX-512 (picked at load time
/// where the CPU has it; the default build targets SSE2). Their sums are
/// vector reductions in double (`omp simd`): partial sums per lane, added
/// in a fixed order, so a row's result depends on that row alone.
#define TRELLIS_VECTOR_CLONES                                                  \
  __attribute__((target_clones("avx512f", "default")))

/// Mean and reciprocal standard deviation of one row.
__attribute__((always_inline)) inline void
rowMoments(const float *x, int64_t n, double epsilon, double &mean,
           double &rstd) {
  double sum = 0, sumSquares = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i)
    sum += x[i];
  mean = sum / n;
  double m = mean;
#pragma omp simd reduction(+ : sumSquares)
  for (int64_t i = 0; i < n; ++i) {
    double centered = x[i] - m;
    sumSquares += centered * centered;
  }
  rstd = 1.0 / std::sqrt(sumSquares / n + epsilon);
}

TRELLIS_VECTOR_CLONES void layerNormRow(const float *x, const float *w,
                                        const float *b, float *y, int64_t n,
                                        double epsilon) {
  double mean, rstd;
  rowMoments(x, n, epsilon, mean, rstd);
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>((x[i] - mean) * rstd) * w[i] + b[i];
}

/// dx of one row; adds the row's terms to the weight and bias gradients'
/// partials dw and db.
TRELLIS_VECTOR_CLONES void
layerNormGradRow(const float *x, const float *w, const float *dy, float *dx,
                 double *__restrict dw, double *__restrict db, int64_t n,
                 double epsilon) {
  double mean, rstd;
  rowMoments(x, n, epsilon, mean, rstd);
  double meanG = 0, meanGX = 0;
#pragma omp simd reduction(+ : meanG, meanGX)
  for (int64_t i = 0; i < n; ++i) {
    double xhat = (x[i] - mean) * rstd;
    double g = double(dy[i]) * w[i];
    meanG += g;
    meanGX += g * xhat;
    dw[i] += double(dy[i]) * xhat;
    db[i] += dy[i];
  }
  meanG /= n;
  meanGX /= n;
  for (int64_t i = 0; i < n; ++i) {
    double xhat = (x[i] - mean) * rstd;
    double g = double(dy[i]) * w[i];
    dx[i] = static_cast<float>(rstd * (g - meanG - xhat * meanGX));
  }
}

void layerNorm(const KernelArgs &args, double epsilon) {
  const Tensor &in = args.in(0);
  FloatValues w(args.in(1)), b(args.in(2));
  int64_t n = in.shape().back(), rows = n ? in.size() / n : 0;
#pragma omp parallel
  {
    FloatRows x(in, n), y(args.out(0), n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      layerNormRow(x.read(r), w.data(), b.data(), y.write(r), n, epsilon);
      y.store(r);
    }
  }
}

void layerNormGrad(const KernelArgs &args, double epsilon) {
  const Tensor &in = args.in(0);
  FloatValues w(args.in(1));
  int64_t n = in.shape().back(), rows = n ? in.size() / n : 0;
  RowChunks chunks(rows, n, 2);
#pragma omp parallel
  {
    FloatRows x(in, n), dy(args.in(2), n), dx(args.out(0), n);
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < chunks.count(); ++chunk)
      for (int64_t r = chunks.first(chunk); r < chunks.end(chunk); ++r) {
        layerNormGradRow(x.read(r), w.data(), dy.read(r), dx.write(r),
                         chunks.partial(r, 0), chunks.partial(r, 1), n,
                         epsilon);
        dx.store(r);
      }
  }
  chunks.sum(0, args.out(1));
  chunks.sum(1, args.out(2));
}

__attribute__((always_inline)) inline double
rowInverseRms(const float *x, int64_t n, double epsilon) {
  double sumSquares = 0;
#pragma omp simd reduction(+ : sumSquares)
  for (int64_t i = 0; i < n; ++i)
    sumSquares += double(x[i]) * x[i];
  return 1.0 / std::sqrt(sumSquares / n + epsilon);
}

TRELLIS_VECTOR_CLONES void rmsNormRow(const float *x, const float *w,
                                      float *y, int64_t n, double epsilon) {
  double inverse = rowInverseRms(x, n, epsilon);
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(x[i] * inverse) * w[i];
}

/// dx of one row; adds the row's terms to the weight gradient's partial.
TRELLIS_VECTOR_CLONES void rmsNormGradRow(const float *x, const float *w,
                                          const float *dy, float *dx,
                                          double *__restrict dw, int64_t n,
                                          double epsilon) {
  double inverse = rowInverseRms(x, n, epsilon);
  double dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i) {
    double g = double(dy[i]) * w[i];
    dot += g * x[i];
    dw[i] += double(dy[i]) * x[i] * inverse;
  }
  double correction = inverse * inverse * dot / n;
  for (int64_t i = 0; i < n; ++i) {
    double g = double(dy[i]) * w[i];
    dx[i] = static_cast<float>(inverse * (g - x[i] * correction));
  }
}

#undef TRELLIS_VECTOR_CLONES

void rmsNorm(const KernelArgs &args, double epsilon) {
  const Tensor &in = args.in(0);
  FloatValues w(args.in(1));
  int64_t n = in.shape().back(), rows = n ? in.size() / n : 0;
#pragma omp parallel
  {
    FloatRows x(in, n), y(args.out(0), n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      rmsNormRow(x.read(r), w.data(), y.write(r), n, epsilon);
      y.store(r);
    }
  }
}

void rmsNormGrad(const KernelArgs &args, double epsilon) {
  const Tensor &in = args.in(0);
  FloatValues w(args.in(1));
  int64_t n = in.shape().back(), rows = n ? in.size() / n : 0;
  RowChunks chunks(rows, n, 1);
#pragma omp parallel
  {
    FloatRows x(in, n), dy(args.in(2), n), dx(args.out(0), n);
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < chunks.count(); ++chunk)
      for (int64_t r = chunks.first(chunk); r < chunks.end(chunk); ++r) {
        rmsNormGradRow(x.read(r), w.data(), dy.read(r), dx.write(r),
                       chunks.partial(r, 0), n, epsilon);
        dx.store(r);
      }
  }
  chunks.sum(0, args.out(1));
}

} // namespace

Status runNormalization(const KernelArgs &args) {
  const OpContract &row = rowOf(args);
  if (row.family == OpFamily::Rowwise) {
    if (row.gradient)
      softmaxGrad(args.in(0), args.in(1), args.out(0));
    else
      softmax(args.in(0), args.out(0));
    return Status::success();
  }
  double epsilon = parametersOf<NormParameters>(args).epsilon;
  switch (*row.memberAs<NormKind>()) {
  case NormKind::Layer:
    if (row.gradient)
      layerNormGrad(args, epsilon);
    else
      layerNorm(args, epsilon);
    break;
  case NormKind::Rms:
    if (row.gradient)
      rmsNormGrad(args, epsilon);
    else
      rmsNorm(args, epsilon);
    break;
  }
  return Status::success();
}

void registerNormalizationKernels(KernelTable &table) {
  table.addFamily(OpFamily::Rowwise, runNormalization);
  table.addFamily(OpFamily::Norm, runNormalization);
}

} // namespace trellis::runtime::cpu
