//===- CudnnAttention.h - attention through cuDNN's SDPA --------*- C++ -*-===//
//
// attention and attention_grad through cuDNN's fused attention (the graph
// API of cudnn-frontend, cuDNN opened at run time), for the instructions it
// covers: bf16 or f16 operands, heads up to 128 wide (a multiple of 8),
// self-attention over a whole sequence in order (no context-parallel
// piece, no zigzag chunks), causal or not, causal ones with or without a
// sliding window (cuDNN's diagonal band), no soft cap. Everything else, and
// every instruction where cuDNN is absent or refuses the shape, runs on the
// CUDA-core kernels (AttentionKernels.cu). TRELLIS_CUDNN_ATTENTION=0 turns it
// off.
//
// The graphs are built when the plan loads (the kernel's prepare) and
// shared by every instruction of the same shape; attention_grad runs the
// forward with its statistics into scratch, then the backward.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_CUDNNATTENTION_H
#define TRELLIS_RUNTIME_CUDA_CUDNNATTENTION_H

#include "CudaSupport.h"

#include <memory>
#include <string>

namespace trellis::runtime::cuda {

/// The cuDNN graphs of `args` (attention or attention_grad), or null when
/// cuDNN does not cover it or cannot be used here: `why` then says why.
std::unique_ptr<PreparedLaunch> prepareCudnnAttention(const KernelArgs &args,
                                                      CudaContext &context,
                                                      std::string &why);

/// Whether `prepared` came from prepareCudnnAttention.
bool isCudnnAttention(const PreparedLaunch *prepared);

/// Enqueues `args` on `context.stream` with the graphs `prepared` holds.
Status runCudnnAttention(const PreparedLaunch &prepared, const KernelArgs &args,
                         CudaContext &context);

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_CUDNNATTENTION_H
