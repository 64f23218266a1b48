//===- Dispatch.cpp - Plan op to kernel -----------------------------------===//

#include "Kernels.h"

#include <unordered_map>

namespace trellis::runtime::cpu {

StatusOr<int64_t> shardPosition(const KernelArgs &args) {
  if (args.axes.empty())
    return int64_t(0);
  if (!args.comm)
    return Status::error(args.instruction.op +
                         " is split over mesh axes: run the plan with --nproc "
                         "equal to its mesh size");
  return args.comm->groupPosition(args.axes);
}

int64_t shardCount(const KernelArgs &args) {
  return args.axes.empty() || !args.comm ? 1
                                         : args.comm->groupSize(args.axes);
}

Kernel findKernel(const std::string &op) {
  static const std::unordered_map<std::string, Kernel> kernels = [] {
    std::unordered_map<std::string, Kernel> table;
    auto add = [&](std::initializer_list<const char *> ops, Kernel kernel) {
      for (const char *name : ops)
        table.emplace(name, kernel);
    };
    add({"matmul"}, runMatmul);
    add({"attention", "attention_grad"}, runAttention);
    add({"attention_block", "attention_merge", "attention_block_grad"},
        runRingAttention);
    add({"positions"}, runPositions);
    add({"fused_elementwise"}, runFusedElementwise);
    add({"reshape", "transpose", "slice", "pad", "concat", "broadcast_to"},
        runLayout);
    add({"reduce_sum", "reduce_mean", "reduce_max"}, runReduction);
    add({"softmax", "softmax_grad", "layer_norm", "layer_norm_grad",
         "rms_norm", "rms_norm_grad"},
        runNormalization);
    add({"embedding", "embedding_grad"}, runEmbedding);
    add({"rope"}, runRope);
    add({"cross_entropy", "cross_entropy_grad"}, runCrossEntropy);
    add({"adamw", "sgd"}, runOptimizer);
    add({"cast"}, runCast);
    add({"add", "sub", "mul", "div", "maximum", "equal_mask", "neg", "exp",
         "log", "tanh", "sqrt", "rsqrt", "sigmoid", "silu", "gelu",
         "gelu_tanh", "relu", "scale", "unary_grad", "accumulate", "fill"},
        runElementwise);
    return table;
  }();
  auto it = kernels.find(op);
  return it == kernels.end() ? nullptr : it->second;
}

} // namespace trellis::runtime::cpu

namespace trellis::runtime::cpu {

Kernel selectKernel(const KernelArgs &args, bool &narrowNative) {
  const std::string &op = args.instruction.op;
  Kernel kernel = findKernel(op);
  // Casts, fused programs, reductions, norms and cross-entropy convert
  // 16-bit values themselves; layout ops move elements of any width.
  narrowNative = kernel == runCast || kernel == runLayout ||
                 kernel == runFusedElementwise || kernel == runReduction ||
                 kernel == runNormalization || kernel == runCrossEntropy;
  // An embedding lookup copies rows of its table's dtype.
  if (op == "embedding" &&
      args.in(0).desc().dtype == args.out(0).desc().dtype)
    narrowNative = true;
  // Without oneDNN's bf16 matmul, a bf16 product is an fp32 one on exact
  // copies (products of bf16 values are exact in fp32), rounded once.
  if (op == "matmul" && args.in(0).desc().dtype == DType::BF16 &&
      oneDnnHasBf16Matmul()) {
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
