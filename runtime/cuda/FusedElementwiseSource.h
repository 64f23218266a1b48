//===- FusedElementwiseSource.h - CUDA C++ of a fused program ---*- C++ -*-===//
//
// fused_elementwise runs on the GPU as one kernel per program, written here
// as CUDA C++ and compiled by NVRTC when the plan loads
// (FusedElementwiseKernels.cpp). Host code: the CPU tests read the source
// and compile it without a GPU.
//
// The kernel computes what the CPU kernel (cpu/FusedElementwise.cpp) and
// the unfused CUDA kernels compute, bit for bit:
//  - a grid-stride loop over the result's elements, each input read with
//    NumPy broadcasting to the result's shape and widened to fp32;
//  - each instruction in fp32 with the formulas of
//    trellis/Common/UnaryFunctions.h (compiled from its text), its slot
//    rounded to the slot's dtype (cvt.rn, nearest even) before any later
//    instruction reads it;
//  - the program's own arithmetic in explicitly rounded intrinsics
//    (__fadd_rn, ...), never contracted into a multiply-add with a
//    neighbouring instruction; an fp32 unary result read by another unary
//    function goes through memory (asLoaded), as it does between two
//    unfused kernels. Inside a unary function NVRTC contracts as nvcc does
//    for the unfused kernels (both default to --fmad=true).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_FUSEDELEMENTWISESOURCE_H
#define TRELLIS_RUNTIME_CUDA_FUSEDELEMENTWISESOURCE_H

#include "trellis/Common/FusedProgram.h"
#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::runtime::cuda {

/// How the kernel reads an input: at the result's element index (the
/// result's shape), at 0 (one element), or through its strides along the
/// result's dimensions (0 where broadcast).
enum class FusedInputAccess { Whole, Single, Broadcast };

/// What a kernel's code depends on besides its program and dtypes.
struct FusedKernelLayout {
  int rank = 0; // the result's
  std::vector<FusedInputAccess> inputs;
  bool operator==(const FusedKernelLayout &other) const {
    return rank == other.rank && inputs == other.inputs;
  }
};

/// The layout of inputs of `inputShapes` broadcast to `resultShape`.
FusedKernelLayout
fusedKernelLayout(const std::vector<std::vector<int64_t>> &inputShapes,
                  const std::vector<int64_t> &resultShape);

/// The kernel's (extern "C") name in the source.
inline constexpr const char *kFusedKernelName = "trellis_fused_elementwise";

/// The source of the kernel evaluating `program` (parsed over the input
/// dtypes it names) with `layout`. Its one parameter is a struct of 8-byte
/// words: each input's pointer, the result's pointer, the element count,
/// then, where an input is Broadcast, the result's shape (rank words) and
/// each Broadcast input's strides (rank words each, in input order).
std::string fusedElementwiseSource(const FusedProgram &program,
                                   const FusedKernelLayout &layout);

/// A header the source includes, as NVRTC takes it.
struct SourceHeader {
  const char *name;
  const char *text;
};

/// trellis/Common/UnaryFunctions.h and what it includes, their text
/// embedded when the runtime was built (<math.h> empty: NVRTC declares
/// the math functions itself).
const std::vector<SourceHeader> &fusedElementwiseHeaders();

/// CUBIN of `source` (with fusedElementwiseHeaders()) for sm_`arch` (90
/// for 9.0), compiled by NVRTC opened at run time; or NVRTC's log, or why
/// NVRTC could not be opened. Needs no GPU.
StatusOr<std::string> compileFusedSource(const std::string &source, int arch);

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_FUSEDELEMENTWISESOURCE_H
