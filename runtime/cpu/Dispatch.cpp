//===- Dispatch.cpp - Instruction to kernel ------------------------------===//

#include "Kernels.h"

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

Status runInstruction(const Instruction &instruction,
                      std::vector<Tensor> &buffers,
                      const std::vector<size_t> &axes, Communicator *comm) {
  KernelArgs args{instruction, buffers, axes, comm};
  const std::string &op = instruction.op;
  if (op == "matmul")
    return runMatmul(args);
  if (op == "attention" || op == "attention_grad")
    return runAttention(args);
  if (op == "reshape" || op == "transpose" || op == "slice" || op == "pad" ||
      op == "concat" || op == "broadcast_to")
    return runLayout(args);
  if (op.rfind("reduce_", 0) == 0)
    return runReduction(args);
  if (op == "softmax" || op == "softmax_grad" || op == "layer_norm" ||
      op == "layer_norm_grad" || op == "rms_norm" || op == "rms_norm_grad")
    return runNormalization(args);
  if (op == "embedding" || op == "embedding_grad")
    return runEmbedding(args);
  if (op == "rope")
    return runRope(args);
  if (op == "cross_entropy" || op == "cross_entropy_grad")
    return runCrossEntropy(args);
  if (op == "adamw" || op == "sgd")
    return runOptimizer(args);
  return runElementwise(args);
}

} // namespace trellis::runtime::cpu
