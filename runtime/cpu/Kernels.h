//===- Kernels.h - CPU kernels of plan instructions -------------*- C++ -*-===//
//
// One function per op family. Each kernel reads its inputs and writes its
// outputs through the buffer table; shapes and attributes were validated
// when the plan loaded (OpShapes.cpp), so kernels only fail on data
// (e.g. a target id outside the vocabulary).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CPU_KERNELS_H
#define TRELLIS_RUNTIME_CPU_KERNELS_H

#include "trellis/Runtime/Backend.h"

namespace trellis::runtime::cpu {

Status runElementwise(const KernelArgs &args);
Status runLayout(const KernelArgs &args);
Status runReduction(const KernelArgs &args);
Status runMatmul(const KernelArgs &args);
/// Matmul of bf16 operands (oneDNN, AMX where the CPU has it).
Status runMatmulBf16(const KernelArgs &args);
Status runNormalization(const KernelArgs &args);
Status runEmbedding(const KernelArgs &args);
Status runRope(const KernelArgs &args);
Status runAttention(const KernelArgs &args);
Status runCrossEntropy(const KernelArgs &args);
Status runOptimizer(const KernelArgs &args);

/// A kernel runs one validated instruction.
using Kernel = Status (*)(const KernelArgs &args);

/// `cast` between f32, bf16 and f16.
Status runCast(const KernelArgs &args);
/// Whether an instruction has bf16 or f16 operands or results.
bool hasNarrowOperands(const KernelArgs &args);
/// Runs an f32 `kernel` on fp32 copies of the instruction's 16-bit
/// operands and rounds its 16-bit results back.
Status runInFloat(const KernelArgs &args, Kernel kernel);

/// The kernel of plan op `op`, or null if the CPU has none.
Kernel findKernel(const std::string &op);

/// The kernel for one instruction: its op's, or a 16-bit variant where one
/// exists; `narrowNative` says whether it takes 16-bit operands itself
/// (else they go through fp32 copies).
Kernel selectKernel(const KernelArgs &args, bool &narrowNative);

/// The rank's position along `args.axes` (0 when the op is not split);
/// fails without a communicator for a split op.
StatusOr<int64_t> shardPosition(const KernelArgs &args);

/// y[0, n) = softmax(x[0, n)), with the sum in double. `x` may equal `y`.
void softmaxRow(const float *x, float *y, int64_t n);

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_KERNELS_H
