//===- HalfFloat.cpp - fp16 to and from fp32 ------------------------------===//

#include "trellis/Common/HalfFloat.h"

namespace trellis {

uint16_t floatToHalf(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: quiet, with the top mantissa bits.
    return sign | 0x7e00u | static_cast<uint16_t>((magnitude >> 13) & 0x3ffu);
  // 65520 and above round to infinity (65504 is the largest finite value).
  if (magnitude >= 0x477ff000u)
    return sign | 0x7c00u;
  int32_t exponent = static_cast<int32_t>(magnitude >> 23) - 127 + 15;
  if (exponent <= 0) {
    // Subnormal (or zero) in fp16: shift the mantissa with its implicit
    // bit, rounding to nearest even on the bits shifted out.
    if (exponent < -10)
      return sign;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half & 1u)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t result = (static_cast<uint32_t>(exponent) << 10) |
                    ((magnitude >> 13) & 0x3ffu);
  uint32_t remainder = magnitude & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent.
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u)))
    ++result;
  return sign | static_cast<uint16_t>(result);
}

float halfToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0)
      return bitsToFloat(sign);
    // Subnormal: normalize.
    exponent = 127 - 15 + 1;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    return bitsToFloat(sign | (exponent << 23) | (mantissa << 13));
  }
  if (exponent == 31)
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsToFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

} // namespace trellis
