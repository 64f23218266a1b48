//===- Tensor.h - Views of a plan's buffers ---------------------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_TENSOR_H
#define TRELLIS_RUNTIME_TENSOR_H

#include "trellis/Runtime/Plan.h"

#include <cstdint>

namespace trellis::runtime {

/// A dense row-major tensor in device memory the executor owns (a
/// persistent allocation or a slot of the step's arena). The typed
/// accessors are for kernels of the device that owns the memory; host code
/// goes through the Device's copies.
class Tensor {
public:
  Tensor() = default;
  Tensor(BufferDesc desc, void *data) : desc_(std::move(desc)), data_(data) {}

  const BufferDesc &desc() const { return desc_; }
  const std::vector<int64_t> &shape() const { return desc_.shape; }
  int64_t size() const { return desc_.numElements(); }
  int64_t bytes() const { return size() * dtypeBytes(desc_.dtype); }

  float *f32() { return static_cast<float *>(data_); }
  const float *f32() const { return static_cast<const float *>(data_); }
  int32_t *i32() { return static_cast<int32_t *>(data_); }
  const int32_t *i32() const { return static_cast<const int32_t *>(data_); }
  void *raw() { return data_; }
  const void *raw() const { return data_; }

private:
  BufferDesc desc_;
  void *data_ = nullptr;
};

/// Whether `count` float values of `dtype` (f32, bf16 or f16) at host
/// memory `data` are all finite: tested on their exponent bits, so no
/// floating-point comparison can be optimized away.
bool allFiniteValues(DType dtype, const void *data, int64_t count);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TENSOR_H
