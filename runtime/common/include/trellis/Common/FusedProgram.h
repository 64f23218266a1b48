//===- FusedProgram.h - The expression program of fused_elementwise -*- C++ -*-===//
//
// A fused_elementwise op evaluates a small program over the elements of its
// result: slots 0 ... n-1 are its inputs (broadcast to the result's
// shape), each instruction appends a slot, and the last slot is the
// result. An instruction is one string of the plan's `program`:
//
//   add %0 %1          a fusible binary function (BinaryFunctions.h: add,
//                      sub, mul, div, maximum): two slots of one dtype
//   scale %2 0.5       a slot times a constant
//   gelu_tanh %3       a unary function (UnaryFunctions.h)
//   unary_grad silu %0 %4   f'(x) dy
//   cast bf16 %5       to f32, bf16 or f16
//
// Every slot has the dtype its op would give unfused (a cast's target,
// else its operands'), and is rounded to it: a fused chain computes
// exactly what its members compute one by one. Shared by the compiler
// (the op's shape rule) and the backends (their kernels).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_FUSEDPROGRAM_H
#define TRELLIS_COMMON_FUSEDPROGRAM_H

#include "trellis/Common/OpContract.h"

#include <string>
#include <vector>

namespace trellis {

struct FusedInstruction {
  enum class Kind { Binary, Scale, Unary, UnaryGrad, Cast };
  Kind kind = Kind::Unary;
  /// The op (add, ..., scale, a unary function, unary_grad, cast).
  std::string op;
  /// unary_grad's function.
  std::string function;
  /// The member a Binary instruction computes.
  BinaryFunction binary = BinaryFunction::Add;
  /// The member a Unary instruction computes, or UnaryGrad differentiates.
  UnaryFunction unary = UnaryFunction::Neg;
  std::vector<int> operands;
  double factor = 1.0;
  /// The slot's dtype.
  ElementType type = ElementType::F32;
};

struct FusedProgram {
  std::vector<FusedInstruction> instructions;
  /// Slot dtypes: the inputs', then each instruction's.
  std::vector<ElementType> slotTypes;
  ElementType resultType() const { return slotTypes.back(); }
};

/// Parses `program` over inputs of `inputTypes`; or says what was expected
/// and what was found.
Diagnostic parseFusedProgram(const std::vector<std::string> &program,
                             const std::vector<ElementType> &inputTypes,
                             FusedProgram &parsed);

} // namespace trellis

#endif // TRELLIS_COMMON_FUSEDPROGRAM_H
