//===- UnaryFunctions.h - The unary functions and their derivatives -*- C++
//-*-===//
//
// neg, exp, log, tanh, sqrt, rsqrt, sigmoid, silu, gelu (erf), gelu_tanh
// and relu, and d f(x) / dx of each (unary_grad), in fp32: one definition
// that the CPU kernels and the CUDA kernels both compile (host and device),
// so every backend computes the same formulas.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_UNARYFUNCTIONS_H
#define TRELLIS_COMMON_UNARYFUNCTIONS_H

#include "trellis/Common/HostDevice.h"

#include <math.h>

namespace trellis {

enum class UnaryFunction {
  Neg,
  Exp,
  Log,
  Tanh,
  Sqrt,
  Rsqrt,
  Sigmoid,
  Silu,
  Gelu,
  GeluTanh,
  Relu
};

/// The function a plan names ("gelu_tanh"); validation admits only these
/// names, anything else reads as neg.
inline UnaryFunction parseUnaryFunction(const char *name) {
  struct Named {
    const char *text;
    UnaryFunction fn;
  };
  static const Named names[] = {{"neg", UnaryFunction::Neg},
                                {"exp", UnaryFunction::Exp},
                                {"log", UnaryFunction::Log},
                                {"tanh", UnaryFunction::Tanh},
                                {"sqrt", UnaryFunction::Sqrt},
                                {"rsqrt", UnaryFunction::Rsqrt},
                                {"sigmoid", UnaryFunction::Sigmoid},
                                {"silu", UnaryFunction::Silu},
                                {"gelu", UnaryFunction::Gelu},
                                {"gelu_tanh", UnaryFunction::GeluTanh},
                                {"relu", UnaryFunction::Relu}};
  for (const Named &named : names) {
    const char *a = named.text, *b = name;
    while (*a && *a == *b)
      ++a, ++b;
    if (*a == 0 && *b == 0)
      return named.fn;
  }
  return UnaryFunction::Neg;
}

namespace unary {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoefficient = 0.044715f;
constexpr float kInverseSqrt2 = 0.70710678118654752f;
constexpr float kInverseSqrt2Pi = 0.3989422804014327f;

TRELLIS_HOST_DEVICE inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
} // namespace unary

/// f(x).
TRELLIS_HOST_DEVICE inline float applyUnary(UnaryFunction fn, float x) {
  using namespace unary;
  switch (fn) {
  case UnaryFunction::Neg:
    return -x;
  case UnaryFunction::Exp:
    return expf(x);
  case UnaryFunction::Log:
    return logf(x);
  case UnaryFunction::Tanh:
    return tanhf(x);
  case UnaryFunction::Sqrt:
    return sqrtf(x);
  case UnaryFunction::Rsqrt:
    return 1.0f / sqrtf(x);
  case UnaryFunction::Sigmoid:
    return sigmoid(x);
  case UnaryFunction::Silu:
    return x * sigmoid(x);
  case UnaryFunction::Gelu:
    return 0.5f * x * (1.0f + erff(x * kInverseSqrt2));
  case UnaryFunction::GeluTanh:
    return 0.5f * x *
           (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCoefficient * x * x * x)));
  case UnaryFunction::Relu:
    return x > 0 ? x : 0;
  }
  return x;
}

/// d f(x) / dx.
TRELLIS_HOST_DEVICE inline float unaryDerivative(UnaryFunction fn, float x) {
  using namespace unary;
  switch (fn) {
  case UnaryFunction::Neg:
    return -1.0f;
  case UnaryFunction::Exp:
    return expf(x);
  case UnaryFunction::Log:
    return 1.0f / x;
  case UnaryFunction::Tanh: {
    float t = tanhf(x);
    return 1.0f - t * t;
  }
  case UnaryFunction::Sqrt:
    return 0.5f / sqrtf(x);
  case UnaryFunction::Rsqrt:
    return -0.5f / (x * sqrtf(x));
  case UnaryFunction::Sigmoid: {
    float s = sigmoid(x);
    return s * (1.0f - s);
  }
  case UnaryFunction::Silu: {
    float s = sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
  }
  case UnaryFunction::Gelu: {
    float cdf = 0.5f * (1.0f + erff(x * kInverseSqrt2));
    float pdf = kInverseSqrt2Pi * expf(-0.5f * x * x);
    return cdf + x * pdf;
  }
  case UnaryFunction::GeluTanh: {
    float inner = kSqrt2OverPi * (x + kGeluCoefficient * x * x * x);
    float t = tanhf(inner);
    float dInner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoefficient * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dInner;
  }
  case UnaryFunction::Relu:
    return x > 0 ? 1.0f : 0.0f;
  }
  return 0.0f;
}

} // namespace trellis

#endif // TRELLIS_COMMON_UNARYFUNCTIONS_H
