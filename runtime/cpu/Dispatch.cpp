//===- Dispatch.cpp - Plan op to kernel -----------------------------------===//

#include "Kernels.h"

namespace trellis::runtime::cpu {

const KernelTable &cpuKernels() {
  static const KernelTable table = [] {
    KernelTable kernels;
    for (void (*registerKernels)(KernelTable &) :
         {registerAttentionKernels, registerCastKernels,
          registerCrossEntropyKernels, registerElementwiseKernels,
          registerEmbeddingKernels, registerExpertKernels,
          registerFusedElementwiseKernels, registerLayoutKernels,
          registerMatmulKernels, registerNormalizationKernels,
          registerOptimizerKernels, registerReductionKernels,
          registerRingAttentionKernels})
      registerKernels(kernels);
    return kernels;
  }();
  return table;
}

Kernel findKernel(const std::string &op) {
  const Kernel *kernel = cpuKernels().find(op);
  return kernel ? *kernel : nullptr;
}

Kernel selectKernel(const KernelArgs &args, bool &narrowNative) {
  const OpContract &row = rowOf(args);
  const Kernel *registered = cpuKernels().find(row.id);
  Kernel kernel = registered ? *registered : nullptr;
  // Casts, fused programs, reductions, norms and cross-entropy convert
  // 16-bit values themselves; layout ops move elements of any width.
  narrowNative = kernel == runCast || kernel == runLayout ||
                 kernel == runFusedElementwise || kernel == runReduction ||
                 kernel == runNormalization || kernel == runCrossEntropy;
  // An embedding lookup copies rows of its table's dtype.
  if (row.family == OpFamily::Embedding && !row.gradient &&
      args.in(0).desc().dtype == args.out(0).desc().dtype)
    narrowNative = true;
  // Without oneDNN's bf16 matmul, a bf16 product is an fp32 one on exact
  // copies (products of bf16 values are exact in fp32), rounded once.
  if (row.family == OpFamily::Matmul &&
      args.in(0).desc().dtype == DType::BF16 && oneDnnHasBf16Matmul()) {
    narrowNative = true;
    return runMatmulBf16;
  }
  if (kernel == runElementwise && isNarrowElementwise(args)) {
    narrowNative = true;
    return runNarrowElementwise;
  }
  return kernel;
}

} // namespace trellis::runtime::cpu
