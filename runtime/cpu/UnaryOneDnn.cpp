//===- UnaryOneDnn.cpp - Pointwise functions through oneDNN's eltwise -----===//
//
// The unary functions and their gradients (y = f(x), dx = f'(x) dy) over
// contiguous f32 elements run as oneDNN eltwise primitives: JIT-compiled
// for the machine's vector width (AVX-512 here) and split over the
// device's OpenMP threads. Each element is computed alone, so results do
// not depend on the thread count or on where it sits in its tensor.
// UnaryKernelTest states the accuracy against the C library (3e-5
// relative to max(|value|, 0.01), as the scalar formulas in fp32); log
// stays scalar (oneDNN's errs by 1.4e-4 near 1). Primitives are built
// once per thread, function, direction and length, and kept.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <dnnl.hpp>

#include <map>
#include <optional>
#include <tuple>

namespace trellis::runtime::cpu {

namespace {

using dnnl::algorithm;
using dnnl::memory;

struct Eltwise {
  algorithm kind;
  float alpha = 0, beta = 0;
};

/// oneDNN's form of `function`, if it has one (a function without one runs
/// the shared formulas' loops).
std::optional<Eltwise> eltwiseOf(UnaryFunction function) {
  using F = UnaryFunction;
  switch (function) {
  case F::Neg:
    return Eltwise{algorithm::eltwise_linear, -1.0f, 0.0f};
  case F::Exp:
    return Eltwise{algorithm::eltwise_exp};
  case F::Tanh:
    return Eltwise{algorithm::eltwise_tanh};
  case F::Sqrt:
    return Eltwise{algorithm::eltwise_sqrt};
  case F::Rsqrt:
    return Eltwise{algorithm::eltwise_pow, 1.0f, -0.5f};
  case F::Sigmoid:
    return Eltwise{algorithm::eltwise_logistic};
  case F::Silu:
    return Eltwise{algorithm::eltwise_swish, 1.0f};
  case F::Gelu:
    return Eltwise{algorithm::eltwise_gelu_erf};
  case F::GeluTanh:
    return Eltwise{algorithm::eltwise_gelu_tanh};
  case F::Relu:
    return Eltwise{algorithm::eltwise_relu, 0.0f};
  case F::Abs:
    return Eltwise{algorithm::eltwise_abs};
  default:
    return std::nullopt;
  }
}

dnnl::engine &engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

/// One per thread: fused kernels run eltwise primitives from several
/// threads at once, and a stream is not to be shared among them.
dnnl::stream &stream() {
  thread_local dnnl::stream instance(engine());
  return instance;
}

/// A built primitive with memory objects bound to it, rebound to each
/// call's arrays.
struct Built {
  dnnl::primitive primitive;
  memory source, upstream, result;
};

/// One cache per thread: fused kernels run eltwise from several threads at
/// once, block by block, and a lookup must cost far less than a block.
using Cache = std::map<std::tuple<UnaryFunction, bool, int64_t>, Built>;

Cache &cache() {
  thread_local Cache instance;
  return instance;
}

dnnl::primitive build(const Eltwise &form, bool gradient, int64_t n) {
  memory::desc desc({n}, memory::data_type::f32, memory::format_tag::a);
  dnnl::eltwise_forward::primitive_desc forward(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, form.kind,
                                  desc, form.alpha, form.beta),
      engine());
  if (!gradient)
    return dnnl::eltwise_forward(forward);
  dnnl::eltwise_backward::primitive_desc backward(
      dnnl::eltwise_backward::desc(form.kind, desc, desc, form.alpha,
                                   form.beta),
      engine(), forward);
  return dnnl::eltwise_backward(backward);
}

} // namespace

bool runUnaryOneDnn(UnaryFunction function, const float *x, const float *dy,
                    float *y, int64_t n) {
  std::optional<Eltwise> form = eltwiseOf(function);
  if (!form || n == 0)
    return form.has_value();
  bool gradient = dy != nullptr;
  auto key = std::make_tuple(function, gradient, n);
  Cache &built = cache();
  auto it = built.find(key);
  if (it == built.end()) {
    memory::desc desc({n}, memory::data_type::f32, memory::format_tag::a);
    Built entry{build(*form, gradient, n), memory(desc, engine(), nullptr),
                memory(desc, engine(), nullptr),
                memory(desc, engine(), nullptr)};
    it = built.emplace(key, std::move(entry)).first;
  }
  Built &entry = it->second;
  entry.source.set_data_handle(const_cast<float *>(x));
  entry.result.set_data_handle(y);
  if (!gradient) {
    entry.primitive.execute(stream(), {{DNNL_ARG_SRC, entry.source},
                                       {DNNL_ARG_DST, entry.result}});
  } else {
    entry.upstream.set_data_handle(const_cast<float *>(dy));
    entry.primitive.execute(stream(), {{DNNL_ARG_SRC, entry.source},
                                       {DNNL_ARG_DIFF_DST, entry.upstream},
                                       {DNNL_ARG_DIFF_SRC, entry.result}});
  }
  stream().wait();
  return true;
}

} // namespace trellis::runtime::cpu
