//===- Tensor.h - Host buffers of a plan ------------------------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_TENSOR_H
#define TRELLIS_RUNTIME_TENSOR_H

#include "trellis/Runtime/Plan.h"

#include <cstdint>
#include <vector>

namespace trellis::runtime {

/// A dense row-major host tensor of f32 or i32.
class Tensor {
public:
  Tensor() = default;
  explicit Tensor(BufferDesc desc) : desc_(std::move(desc)) {
    if (desc_.dtype == DType::F32)
      f32_.assign(desc_.numElements(), 0.0f);
    else
      i32_.assign(desc_.numElements(), 0);
  }

  const BufferDesc &desc() const { return desc_; }
  const std::vector<int64_t> &shape() const { return desc_.shape; }
  int64_t size() const { return desc_.numElements(); }
  int64_t bytes() const { return size() * 4; }

  float *f32() { return f32_.data(); }
  const float *f32() const { return f32_.data(); }
  int32_t *i32() { return i32_.data(); }
  const int32_t *i32() const { return i32_.data(); }
  /// The raw bytes, whatever the dtype.
  void *raw() { return desc_.dtype == DType::F32 ? (void *)f32_.data() : (void *)i32_.data(); }
  const void *raw() const {
    return desc_.dtype == DType::F32 ? (const void *)f32_.data()
                                     : (const void *)i32_.data();
  }

private:
  BufferDesc desc_;
  std::vector<float> f32_;
  std::vector<int32_t> i32_;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TENSOR_H
