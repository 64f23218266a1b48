//===- UnaryFunctions.h - The unary functions and their derivatives -*- C++
//-*-===//
//
// The unary family's members (TRELLIS_UNARY_FUNCTIONS), f(x) and
// d f(x) / dx of each (unary_grad), in fp32: one definition that the CPU
// kernels and the CUDA kernels both compile (host and device), so every
// backend computes the same formulas. A new unary function is a row of the
// list, its two formulas, and its graph op (GraphOps.td, GraphEnums.td).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_UNARYFUNCTIONS_H
#define TRELLIS_COMMON_UNARYFUNCTIONS_H

#include "trellis/Common/HostDevice.h"

// NVRTC, which compiles this header into fused kernels, needs none of the
// host code below.
#ifndef __CUDACC_RTC__
#include "trellis/Common/MemberNames.h"
#endif

#include <math.h>

namespace trellis {

/// The unary family, one row per function: its enumerator, the name plans
/// and the graph dialect give it, and whether it is linear (partial sums
/// pass through it). The op table's unary rows, the fused programs'
/// instructions, the graph dialect's enum (checked against this list) and
/// every backend's kernels loop over it; the formulas are below.
#define TRELLIS_UNARY_FUNCTIONS(X)                                             \
  X(Neg, "neg", true)                                                          \
  X(Exp, "exp", false)                                                         \
  X(Log, "log", false)                                                         \
  X(Tanh, "tanh", false)                                                       \
  X(Sqrt, "sqrt", false)                                                       \
  X(Rsqrt, "rsqrt", false)                                                     \
  X(Sigmoid, "sigmoid", false)                                                 \
  X(Silu, "silu", false)                                                       \
  X(Gelu, "gelu", false)                                                       \
  X(GeluTanh, "gelu_tanh", false)                                              \
  X(Relu, "relu", false)                                                       \
  X(Softplus, "softplus", false)                                               \
  X(Abs, "abs", false)

enum class UnaryFunction {
#define TRELLIS_UNARY_ENUMERATOR(NAME, TEXT, LINEAR) NAME,
  TRELLIS_UNARY_FUNCTIONS(TRELLIS_UNARY_ENUMERATOR)
#undef TRELLIS_UNARY_ENUMERATOR
};

// Names and lists for host code; NVRTC's fused kernels (which compile this
// header as device code) need the enum and the formulas alone.
#ifndef __CUDACC_RTC__
/// Every unary function, in enum order.
constexpr UnaryFunction kUnaryFunctions[] = {
#define TRELLIS_UNARY_ENUMERATOR(NAME, TEXT, LINEAR) UnaryFunction::NAME,
    TRELLIS_UNARY_FUNCTIONS(TRELLIS_UNARY_ENUMERATOR)
#undef TRELLIS_UNARY_ENUMERATOR
};

/// The name plans give `fn` ("gelu_tanh").
inline const char *unaryFunctionName(UnaryFunction fn) {
  switch (fn) {
#define TRELLIS_UNARY_NAME(NAME, TEXT, LINEAR)                                 \
  case UnaryFunction::NAME:                                                    \
    return TEXT;
    TRELLIS_UNARY_FUNCTIONS(TRELLIS_UNARY_NAME)
#undef TRELLIS_UNARY_NAME
  }
  return "";
}

/// The enumerator's own spelling ("GeluTanh"), by which generated source
/// (the CUDA backend's fused kernels) names `fn`.
inline const char *unaryFunctionEnumerator(UnaryFunction fn) {
  switch (fn) {
#define TRELLIS_UNARY_ENUMERATOR_NAME(NAME, TEXT, LINEAR)                      \
  case UnaryFunction::NAME:                                                    \
    return #NAME;
    TRELLIS_UNARY_FUNCTIONS(TRELLIS_UNARY_ENUMERATOR_NAME)
#undef TRELLIS_UNARY_ENUMERATOR_NAME
  }
  return "";
}

/// Whether `fn` is linear: f(a + b) = f(a) + f(b).
inline bool isLinearUnary(UnaryFunction fn) {
  switch (fn) {
#define TRELLIS_UNARY_LINEAR(NAME, TEXT, LINEAR)                               \
  case UnaryFunction::NAME:                                                    \
    return LINEAR;
    TRELLIS_UNARY_FUNCTIONS(TRELLIS_UNARY_LINEAR)
#undef TRELLIS_UNARY_LINEAR
  }
  return false;
}

/// The function a plan names ("gelu_tanh"); false for any other name.
inline bool findUnaryFunction(const char *name, UnaryFunction &fn) {
  return findMemberNamed(name, kUnaryFunctions, unaryFunctionName, fn);
}

/// The function a plan names; validation admits only the names of the
/// list, anything else reads as neg.
inline UnaryFunction parseUnaryFunction(const char *name) {
  UnaryFunction fn = UnaryFunction::Neg;
  findUnaryFunction(name, fn);
  return fn;
}
#endif // __CUDACC_RTC__

namespace unary {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoefficient = 0.044715f;
constexpr float kInverseSqrt2 = 0.70710678118654752f;
constexpr float kInverseSqrt2Pi = 0.3989422804014327f;
/// softplus is x itself above this (torch.nn.functional.softplus's
/// default threshold).
constexpr float kSoftplusThreshold = 20.0f;

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
  case UnaryFunction::Softplus:
    // log(1 + e^x), x itself above 20 (torch's threshold).
    return x > kSoftplusThreshold ? x : log1pf(expf(x));
  case UnaryFunction::Abs:
    return fabsf(x);
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
  case UnaryFunction::Softplus:
    return x > kSoftplusThreshold ? 1.0f : sigmoid(x);
  case UnaryFunction::Abs:
    // torch's: the sign, 0 at 0.
    return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f;
  }
  return 0.0f;
}

} // namespace trellis

#endif // TRELLIS_COMMON_UNARYFUNCTIONS_H
