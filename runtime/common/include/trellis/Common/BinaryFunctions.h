//===- BinaryFunctions.h - The binary functions, declared once --*- C++ -*-===//
//
// The binary family's members (TRELLIS_BINARY_FUNCTIONS) and f(a, b) of
// each in fp32: one definition that the op table's rows, the fused
// programs and every backend's kernels (host, device, and the fused
// kernels NVRTC compiles from this header) read, so every backend
// computes the same formulas. A new binary function is a row of the list,
// its formula, its graph op (GraphOps.td) and its gradient
// (GraphGradients.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_BINARYFUNCTIONS_H
#define TRELLIS_COMMON_BINARYFUNCTIONS_H

#include "trellis/Common/HostDevice.h"

// NVRTC, which compiles this header into fused kernels, needs none of the
// host code below.
#ifndef __CUDACC_RTC__
#include "trellis/Common/MemberNames.h"
#endif

namespace trellis {

/// One row per function: its enumerator, the name plans give it, whether
/// it is linear in its operands jointly (partial sums pass through), and
/// whether fused_elementwise programs take it.
#define TRELLIS_BINARY_FUNCTIONS(X)                                            \
  X(Add, "add", true, true)                                                    \
  X(Sub, "sub", true, true)                                                    \
  X(Mul, "mul", false, true)                                                   \
  X(Div, "div", false, true)                                                   \
  X(Maximum, "maximum", false, true)                                           \
  X(EqualMask, "equal_mask", false, false)

enum class BinaryFunction {
#define TRELLIS_BINARY_ENUMERATOR(NAME, TEXT, LINEAR, FUSIBLE) NAME,
  TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_ENUMERATOR)
#undef TRELLIS_BINARY_ENUMERATOR
};

/// Every binary function, in enum order.
constexpr BinaryFunction kBinaryFunctions[] = {
#define TRELLIS_BINARY_ENUMERATOR(NAME, TEXT, LINEAR, FUSIBLE)                 \
  BinaryFunction::NAME,
    TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_ENUMERATOR)
#undef TRELLIS_BINARY_ENUMERATOR
};

/// The name plans give `fn` ("maximum").
inline const char *binaryFunctionName(BinaryFunction fn) {
  switch (fn) {
#define TRELLIS_BINARY_NAME(NAME, TEXT, LINEAR, FUSIBLE)                       \
  case BinaryFunction::NAME:                                                   \
    return TEXT;
    TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_NAME)
#undef TRELLIS_BINARY_NAME
  }
  return "";
}

/// The enumerator of `fn` as written ("Maximum"): for generated source.
inline const char *binaryFunctionEnumerator(BinaryFunction fn) {
  switch (fn) {
#define TRELLIS_BINARY_ENUMERATOR_NAME(NAME, TEXT, LINEAR, FUSIBLE)            \
  case BinaryFunction::NAME:                                                   \
    return #NAME;
    TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_ENUMERATOR_NAME)
#undef TRELLIS_BINARY_ENUMERATOR_NAME
  }
  return "";
}

/// Whether `fn` is linear in its operands jointly: f(a + c, b + d) =
/// f(a, b) + f(c, d).
inline bool isLinearBinary(BinaryFunction fn) {
  switch (fn) {
#define TRELLIS_BINARY_LINEAR(NAME, TEXT, LINEAR, FUSIBLE)                     \
  case BinaryFunction::NAME:                                                   \
    return LINEAR;
    TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_LINEAR)
#undef TRELLIS_BINARY_LINEAR
  }
  return false;
}

/// Whether fused_elementwise programs take `fn` (equal_mask makes a mask,
/// not a value a chain goes on computing with).
inline bool isFusibleBinary(BinaryFunction fn) {
  switch (fn) {
#define TRELLIS_BINARY_FUSIBLE(NAME, TEXT, LINEAR, FUSIBLE)                    \
  case BinaryFunction::NAME:                                                   \
    return FUSIBLE;
    TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_FUSIBLE)
#undef TRELLIS_BINARY_FUSIBLE
  }
  return false;
}

#ifndef __CUDACC_RTC__
/// The function a plan names ("add"); false for any other name.
inline bool findBinaryFunction(const char *name, BinaryFunction &fn) {
  return findMemberNamed(name, kBinaryFunctions, binaryFunctionName, fn);
}
#endif

/// a + b, a - b, a * b and a / b rounded once each: on a device, through
/// the round-to-nearest intrinsics, which are never contracted into an
/// FMA with a neighbour, so a fused chain rounds each step as the unfused
/// kernels (and the host) do.
#ifdef __CUDA_ARCH__
#define TRELLIS_ROUNDED(DEVICE, HOST) return DEVICE;
#else
#define TRELLIS_ROUNDED(DEVICE, HOST) return HOST;
#endif

/// f(a, b) in fp32.
TRELLIS_HOST_DEVICE inline float applyBinary(BinaryFunction fn, float a,
                                             float b) {
  switch (fn) {
  case BinaryFunction::Add:
    TRELLIS_ROUNDED(__fadd_rn(a, b), a + b)
  case BinaryFunction::Sub:
    TRELLIS_ROUNDED(__fsub_rn(a, b), a - b)
  case BinaryFunction::Mul:
    TRELLIS_ROUNDED(__fmul_rn(a, b), a * b)
  case BinaryFunction::Div:
    TRELLIS_ROUNDED(__fdiv_rn(a, b), a / b)
  case BinaryFunction::Maximum:
    return a >= b ? a : b;
  case BinaryFunction::EqualMask:
    return a == b ? 1.0f : 0.0f;
  }
  return 0.0f;
}

#undef TRELLIS_ROUNDED

} // namespace trellis

#endif // TRELLIS_COMMON_BINARYFUNCTIONS_H
