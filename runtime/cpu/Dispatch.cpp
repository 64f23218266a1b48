//===- Dispatch.cpp - Plan op to kernel -----------------------------------===//

#include "Kernels.h"


namespace trellis::runtime::cpu {

KernelTable::KernelTable() : kernels_(opContracts().size(), nullptr) {}

void KernelTable::add(std::initializer_list<const char *> ops, Kernel kernel) {
  for (const char *name : ops) {
    if (const OpContract *contract = findOpContract(name))
      kernels_[contract->id] = kernel;
    else
      unknown_.push_back(name);
  }
}

void KernelTable::addFamily(OpFamily family, Kernel kernel) {
  addRows([family](const OpContract &row) { return row.family == family; },
          kernel);
}

void KernelTable::addRows(const std::function<bool(const OpContract &)> &rows,
                          Kernel kernel) {
  for (const OpContract &contract : opContracts())
    if (rows(contract))
      kernels_[contract.id] = kernel;
}

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
  const OpContract *contract = findOpContract(op);
  return contract ? cpuKernels().find(contract->id) : nullptr;
}

} // namespace trellis::runtime::cpu

namespace trellis::runtime::cpu {

Kernel selectKernel(const KernelArgs &args, bool &narrowNative) {
  const OpContract &row = rowOf(args);
  Kernel kernel = cpuKernels().find(row.id);
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
