//===- HostReduction.cpp - Elementwise reductions in host memory ----------===//

#include "trellis/Runtime/HostReduction.h"

#include "trellis/Common/HalfFloat.h"

#include <algorithm>
#include <cstdint>

namespace trellis::runtime {

namespace {

template <typename T> T combine(ReduceKind kind, T a, T b) {
  switch (kind) {
  case ReduceKind::Sum:
    return a + b;
  case ReduceKind::Max:
    return std::max(a, b);
  case ReduceKind::Min:
    return std::min(a, b);
  }
  return a;
}

template <typename T>
void reduceNative(ReduceKind kind, void *out, const void *a, const void *b,
                  size_t count) {
  T *o = static_cast<T *>(out);
  const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
  for (size_t i = 0; i < count; ++i)
    o[i] = combine(kind, x[i], y[i]);
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduceNarrow(ReduceKind kind, void *out, const void *a, const void *b,
                  size_t count) {
  uint16_t *o = static_cast<uint16_t *>(out);
  const uint16_t *x = static_cast<const uint16_t *>(a);
  const uint16_t *y = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < count; ++i)
    o[i] = Narrow(combine(kind, Widen(x[i]), Widen(y[i])));
}

} // namespace

void reduceElements(DType dtype, ReduceKind kind, void *out, const void *a,
                    const void *b, size_t count) {
  switch (dtype) {
  case DType::F32:
    return reduceNative<float>(kind, out, a, b, count);
  case DType::I32:
    return reduceNative<int32_t>(kind, out, a, b, count);
  case DType::BF16:
    return reduceNarrow<bfloat16ToFloat, floatToBfloat16>(kind, out, a, b,
                                                          count);
  case DType::F16:
    return reduceNarrow<halfToFloat, floatToHalf>(kind, out, a, b, count);
  }
}

} // namespace trellis::runtime
