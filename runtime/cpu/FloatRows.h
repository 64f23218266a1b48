//===- FloatRows.h - Rows of 16-bit tensors as fp32, one at a time -*- C++ -*-===//
//
// Row kernels (norms, reductions) compute in fp32. An f32 tensor's rows are
// read and written in place; a bf16 or f16 tensor's row is widened into a
// buffer of its own (exactly) or rounded from it (to nearest even), a row
// at a time in cache, instead of through a whole fp32 copy of the tensor.
// The values are those of the fp32-copy path: widening is exact and each
// result rounds once.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CPU_FLOATROWS_H
#define TRELLIS_RUNTIME_CPU_FLOATROWS_H

#include "trellis/Runtime/Tensor.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace trellis::runtime::cpu {

/// target[0, n) = the bf16 or f16 values `bits` (exact).
void widenValues(DType dtype, const uint16_t *bits, float *target, int64_t n);
/// bits[0, n) = `source` rounded to bf16 or f16 (nearest even).
void narrowValues(DType dtype, const float *source, uint16_t *bits, int64_t n);

/// Whether `dtype` is a 16-bit float (bf16 or f16).
inline bool isNarrowDType(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16;
}

/// The rows of length `width` of one tensor as fp32, for one thread: each
/// thread of a row loop makes its own.
class FloatRows {
public:
  FloatRows(const Tensor &tensor, int64_t width)
      : dtype_(tensor.desc().dtype), data_(const_cast<void *>(tensor.raw())),
        width_(width) {
    if (isNarrowDType(dtype_))
      buffer_.resize(width);
  }

  /// Row `r` to read.
  const float *read(int64_t r) {
    if (!isNarrowDType(dtype_))
      return static_cast<const float *>(data_) + r * width_;
    widenValues(dtype_, static_cast<const uint16_t *>(data_) + r * width_,
                buffer_.data(), width_);
    return buffer_.data();
  }

  /// Where to write row `r`; `store(r)` puts it in the tensor.
  float *write(int64_t r) {
    return isNarrowDType(dtype_) ? buffer_.data()
                                 : static_cast<float *>(data_) + r * width_;
  }
  void store(int64_t r) {
    if (isNarrowDType(dtype_))
      narrowValues(dtype_, buffer_.data(),
                   static_cast<uint16_t *>(data_) + r * width_, width_);
  }

private:
  DType dtype_;
  void *data_;
  int64_t width_;
  std::vector<float> buffer_;
};

/// A whole (small) tensor as fp32: its own values, or a widened copy.
class FloatValues {
public:
  explicit FloatValues(const Tensor &tensor) {
    if (!isNarrowDType(tensor.desc().dtype)) {
      values_ = tensor.f32();
      return;
    }
    copy_.resize(tensor.size());
    widenValues(tensor.desc().dtype,
                static_cast<const uint16_t *>(tensor.raw()), copy_.data(),
                tensor.size());
    values_ = copy_.data();
  }
  const float *data() const { return values_; }

private:
  const float *values_;
  std::vector<float> copy_;
};

/// out = `values` (out.size() of them), rounded to out's dtype.
inline void storeValues(const float *values, Tensor &out) {
  if (isNarrowDType(out.desc().dtype))
    narrowValues(out.desc().dtype, values, static_cast<uint16_t *>(out.raw()),
                 out.size());
  else
    std::copy(values, values + out.size(), out.f32());
}

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_FLOATROWS_H
