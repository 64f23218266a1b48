//===- HalfFloat.h - bf16 and fp16 to and from fp32 -------------*- C++ -*-===//
//
// The 16-bit float encodings the plan, the kernels and safetensors files
// use, as raw bits. To 16 bits rounds to nearest, ties to even (as
// PyTorch's and the hardware's conversions do); NaN stays NaN (quiet),
// infinities stay infinite, values beyond the format's range become
// infinities (fp16 above 65504). Widening is exact.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_HALFFLOAT_H
#define TRELLIS_COMMON_HALFFLOAT_H

#include <cstdint>
#include <cstring>

namespace trellis {

inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

inline float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

/// bfloat16: fp32's sign and exponent, 7 mantissa bits.
inline uint16_t floatToBfloat16(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  uint32_t roundingBias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

inline float bfloat16ToFloat(uint16_t bits) {
  return bitsToFloat(static_cast<uint32_t>(bits) << 16);
}

/// bfloat16ToFloat(floatToBfloat16(value)) in 32-bit arithmetic only (it
/// vectorizes without packing to 16 bits and back).
inline float roundToBfloat16(float value) {
  uint32_t bits = floatBits(value);
  uint32_t quiet = (bits | 0x00400000u) & 0xffff0000u;
  uint32_t nearest = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  return bitsToFloat((bits & 0x7fffffffu) > 0x7f800000u ? quiet : nearest);
}

/// The bf16 bits of a value that bf16 holds exactly (a roundToBfloat16
/// result): its upper half.
inline uint16_t exactBfloat16(float value) {
  return static_cast<uint16_t>(floatBits(value) >> 16);
}

/// IEEE binary16: 5 exponent bits (bias 15), 10 mantissa bits.
uint16_t floatToHalf(float value);
float halfToFloat(uint16_t bits);

} // namespace trellis

#endif // TRELLIS_COMMON_HALFFLOAT_H
