//===- CudaBackend.h - NVIDIA GPUs as devices -------------------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_CUDA_CUDABACKEND_H
#define TRELLIS_RUNTIME_CUDA_CUDABACKEND_H

#include "trellis/Runtime/Backend.h"

namespace trellis::runtime::cuda {

/// The "cuda" backend: one GPU per rank (the local rank's ordinal), the
/// plan's arena in one device allocation, kernels on a compute stream,
/// collectives on a communication stream ordered by events.
const Backend &backend();

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_CUDABACKEND_H
