//===- Tensor.cpp - Views of a plan's buffers -----------------------------===//

#include "trellis/Runtime/Tensor.h"

namespace trellis::runtime {

namespace {

/// Whether no element of `bits` has every bit of `exponent` set (an
/// infinity or a NaN).
template <typename Bits>
bool noneAllOnes(const Bits *bits, int64_t count, Bits exponent) {
  Bits seen = 0;
  // OR of each element's exponent test: one pass without a branch.
  for (int64_t i = 0; i < count; ++i)
    seen |= static_cast<Bits>((bits[i] & exponent) == exponent);
  return seen == 0;
}

} // namespace

bool allFiniteValues(DType dtype, const void *data, int64_t count) {
  switch (dtype) {
  case DType::F32:
    return noneAllOnes(static_cast<const uint32_t *>(data), count,
                       uint32_t(0x7f800000));
  case DType::BF16:
    return noneAllOnes(static_cast<const uint16_t *>(data), count,
                       uint16_t(0x7f80));
  case DType::F16:
    return noneAllOnes(static_cast<const uint16_t *>(data), count,
                       uint16_t(0x7c00));
  case DType::I32:
    return true;
  }
  return true;
}

} // namespace trellis::runtime
