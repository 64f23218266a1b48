//===- Elementwise.cpp - Pointwise kernels --------------------------------===//

#include "Kernels.h"

#include "trellis/Common/UnaryFunctions.h"

#include <cmath>
#include <functional>

namespace trellis::runtime::cpu {

namespace {

/// out[i] = f(lhs[i'], rhs[i'']) over the broadcast index space; rows of
/// the innermost dimension split over the threads.
template <typename Fn>
void broadcastBinary(const Tensor &lhs, const Tensor &rhs, Tensor &out, Fn fn) {
  const float *a = lhs.f32(), *b = rhs.f32();
  float *o = out.f32();
  int64_t total = out.size();
  if (lhs.shape() == out.shape() && rhs.shape() == out.shape()) {
#pragma omp parallel for simd schedule(static) if (total >= kParallelElements)
    for (int64_t i = 0; i < total; ++i)
      o[i] = fn(a[i], b[i]);
    return;
  }
  const std::vector<int64_t> &shape = out.shape();
  size_t rank = shape.size();
  if (rank == 0) {
    o[0] = fn(a[0], b[0]);
    return;
  }
  std::vector<int64_t> sa = broadcastStrides(lhs.shape(), rank);
  std::vector<int64_t> sb = broadcastStrides(rhs.shape(), rank);
  int64_t inner = shape[rank - 1];
  int64_t ia = sa[rank - 1], ib = sb[rank - 1];
  int64_t rows = inner > 0 ? total / inner : 0;
#pragma omp parallel for schedule(static) if (total >= kParallelElements)
  for (int64_t row = 0; row < rows; ++row) {
    // The row's operand offsets from its index over the outer dimensions.
    int64_t offsetA = 0, offsetB = 0, rest = row;
    for (size_t d = rank - 1; d-- > 0;) {
      int64_t index = rest % shape[d];
      rest /= shape[d];
      offsetA += index * sa[d];
      offsetB += index * sb[d];
    }
    float *target = o + row * inner;
    for (int64_t j = 0; j < inner; ++j)
      target[j] = fn(a[offsetA + j * ia], b[offsetB + j * ib]);
  }
}

using UnaryFn = UnaryFunction;

/// The shared formulas (trellis/Common/UnaryFunctions.h), one instance per
/// function so each loop below is straight-line code.
template <UnaryFn Fn> float applyUnary(float x) {
  return trellis::applyUnary(Fn, x);
}
template <UnaryFn Fn> float unaryDerivative(float x) {
  return trellis::unaryDerivative(Fn, x);
}

/// y = f(x), or with a gradient dy: y = f'(x) dy. One loop per function, so
/// the compiler sees straight-line code.
template <UnaryFn Fn>
void unaryLoop(const float *x, const float *dy, float *y, int64_t n) {
  if (dy)
    for (int64_t i = 0; i < n; ++i)
      y[i] = unaryDerivative<Fn>(x[i]) * dy[i];
  else
    for (int64_t i = 0; i < n; ++i)
      y[i] = applyUnary<Fn>(x[i]);
}

void runUnary(UnaryFn fn, const float *x, const float *dy, float *y,
              int64_t n) {
  switch (fn) {
#define TRELLIS_UNARY_CASE(NAME, TEXT, LINEAR)                                 \
  case UnaryFn::NAME:                                                          \
    return unaryLoop<UnaryFn::NAME>(x, dy, y, n);
    TRELLIS_UNARY_FUNCTIONS(TRELLIS_UNARY_CASE)
#undef TRELLIS_UNARY_CASE
  }
}

/// out = f(lhs, rhs) for one binary function, as straight-line code.
template <BinaryFunction Fn> void binaryKernel(const KernelArgs &args) {
  broadcastBinary(args.in(0), args.in(1), args.out(0),
                  [](float a, float b) { return applyBinary(Fn, a, b); });
}

void runBinary(BinaryFunction fn, const KernelArgs &args) {
  switch (fn) {
#define TRELLIS_BINARY_CASE(NAME, TEXT, LINEAR, FUSIBLE)                       \
  case BinaryFunction::NAME:                                                   \
    return binaryKernel<BinaryFunction::NAME>(args);
    TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_CASE)
#undef TRELLIS_BINARY_CASE
  }
}

} // namespace

void runUnaryFunction(UnaryFunction function, const float *x, const float *dy,
                      float *y, int64_t n) {
  // Through oneDNN's vectorized eltwise at every length (an element's
  // value must not depend on its tensor's size: a split tensor's pieces
  // get the whole's values); the scalar loops where it has no form.
  if (!runUnaryOneDnn(function, x, dy, y, n))
    runUnary(function, x, dy, y, n);
}

/// The pointwise families: fill, accumulate, binary, unary, unary_grad and
/// scale, each member read from the instruction's row.
Status runElementwise(const KernelArgs &args) {
  const OpContract &row = rowOf(args);
  switch (row.family) {
  case OpFamily::Fill: {
    Tensor &out = args.out(0);
    const FillParameters &fill = parametersOf<FillParameters>(args);
    if (!fill.values.empty())
      std::copy(fill.values.begin(), fill.values.end(), out.f32());
    else
      std::fill(out.f32(), out.f32() + out.size(),
                static_cast<float>(fill.value));
    return Status::success();
  }
  case OpFamily::Accumulate: {
    // total = value for the step's first micro-batch, total += value after.
    const float *value = args.in(0).f32();
    float *total = args.out(0).f32();
    int64_t n = args.out(0).size();
    if (parametersOf<AccumulateParameters>(args).first) {
      std::copy(value, value + n, total);
    } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
      for (int64_t i = 0; i < n; ++i)
        total[i] += value[i];
    }
    return Status::success();
  }
  case OpFamily::Binary:
    runBinary(*row.binaryFunction(), args);
    return Status::success();
  case OpFamily::Scale: {
    float factor =
        static_cast<float>(parametersOf<ScaleParameters>(args).factor);
    const float *x = args.in(0).f32();
    float *y = args.out(0).f32();
    int64_t n = args.out(0).size();
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      y[i] = x[i] * factor;
    return Status::success();
  }
  case OpFamily::Unary:
    runUnaryFunction(*row.unaryFunction(), args.in(0).f32(), nullptr,
                     args.out(0).f32(), args.out(0).size());
    return Status::success();
  case OpFamily::UnaryGrad:
    runUnaryFunction(parametersOf<UnaryGradParameters>(args).function,
                     args.in(0).f32(), args.in(1).f32(), args.out(0).f32(),
                     args.out(0).size());
    return Status::success();
  default:
    return Status::error(std::string("cpu: the elementwise kernel has no ") +
                         opFamilyName(row.family) + " op '" + row.name + "'");
  }
}

void registerElementwiseKernels(KernelTable &table) {
  for (OpFamily family :
       {OpFamily::Fill, OpFamily::Accumulate, OpFamily::Binary,
        OpFamily::Scale, OpFamily::Unary, OpFamily::UnaryGrad})
    table.addFamily(family, runElementwise);
}

} // namespace trellis::runtime::cpu
