//===- DeviceFloat.cuh - 16-bit floats read and written in fp32 -*- CUDA
//-*-===//
//
// The backend's kernels compute in fp32: widen() reads an element of any
// float dtype, narrow() rounds a result once to nearest even; onFloat()
// picks a kernel's instance for a tensor's dtype.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_DEVICEFLOAT_CUH
#define TRELLIS_RUNTIME_CUDA_DEVICEFLOAT_CUH

#include "trellis/Runtime/Status.h"
#include "trellis/Runtime/Tensor.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

namespace trellis::runtime::cuda {

__device__ inline float widen(float value) { return value; }
__device__ inline float widen(__nv_bfloat16 value) {
  return __bfloat162float(value);
}
__device__ inline float widen(__half value) { return __half2float(value); }

template <typename T> __device__ T narrow(float value);
template <> __device__ inline float narrow<float>(float value) { return value; }
template <> __device__ inline __nv_bfloat16 narrow<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}
template <> __device__ inline __half narrow<__half>(float value) {
  return __float2half_rn(value);
}

/// Calls `body(T())` with T the device type of float dtype `dtype`; an
/// integer dtype is an error naming it.
template <typename Body> Status onFloat(DType dtype, Body body) {
  switch (dtype) {
  case DType::F32:
    return body(float());
  case DType::BF16:
    return body(__nv_bfloat16());
  case DType::F16:
    return body(__half());
  default:
    return Status::error(std::string("cuda: expected a float dtype, found ") +
                         dtypeName(dtype));
  }
}

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_DEVICEFLOAT_CUH
