//===- HostDevice.h - Functions both the host and CUDA compile --*- C++ -*-===//
//
// TRELLIS_HOST_DEVICE marks a function of runtime/common that the CUDA
// kernels call too (a formula written once for every backend); plain
// `inline` for every other compiler.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_HOSTDEVICE_H
#define TRELLIS_COMMON_HOSTDEVICE_H

#ifdef __CUDACC__
#define TRELLIS_HOST_DEVICE __host__ __device__
#else
#define TRELLIS_HOST_DEVICE
#endif

#endif // TRELLIS_COMMON_HOSTDEVICE_H
