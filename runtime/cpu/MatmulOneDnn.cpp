//===- MatmulOneDnn.cpp - bf16 matrix products through oneDNN -------------===//
//
// bf16 operands go to oneDNN's matmul, which picks AMX-BF16 (or AVX-512
// BF16) tiles by itself and accumulates in fp32 before rounding the result
// to bf16. Transposed operands are strided views, a shared 2-D right-hand
// side a weights tensor broadcast over the batch. Primitives are built once
// per shape and kept. oneDNN 2.6 (Debian bookworm's) has bf16 matmul only
// on CPUs with AVX-512 (AVX-512 BF16 or AMX for speed): elsewhere, e.g. on
// an AVX2-only AMD EPYC, it builds no primitive, and selectKernel sends bf16
// products to the fp32 sgemm through copies (oneDnnHasBf16Matmul). A
// matmul with f32_result writes the fp32 accumulators as they are; a
// matmul_accumulate does so into its f32 total, and adds to it (a sum
// post-op) after the step's first product.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>

namespace trellis::runtime::cpu {

namespace {

using dnnl::memory;

struct MatmulShape {
  int64_t batch, m, k, n;
  bool transposeLhs, transposeRhs, sharedRhs;
  /// An f32 result (f32_result, or matmul_accumulate's total), and whether
  /// the product is added to it.
  bool f32Result = false, addsToResult = false;

  auto key() const {
    return std::make_tuple(batch, m, k, n, transposeLhs, transposeRhs,
                           sharedRhs, f32Result, addsToResult);
  }
  bool operator<(const MatmulShape &other) const {
    return key() < other.key();
  }
};

struct Primitive {
  memory::desc lhs, rhs, out;
  dnnl::matmul matmul;
};

dnnl::engine &engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

Primitive build(const MatmulShape &s) {
  memory::dims lhsDims = {s.batch, s.m, s.k};
  // Row-major [batch, m, k], or stored as [batch, k, m] when transposed.
  memory::dims lhsStrides = s.transposeLhs
                                ? memory::dims{s.m * s.k, 1, s.m}
                                : memory::dims{s.m * s.k, s.k, 1};
  int64_t rhsBatch = s.sharedRhs ? 1 : s.batch;
  memory::dims rhsDims = {rhsBatch, s.k, s.n};
  memory::dims rhsStrides = s.transposeRhs
                                ? memory::dims{s.k * s.n, 1, s.k}
                                : memory::dims{s.k * s.n, s.n, 1};
  Primitive primitive;
  primitive.lhs = memory::desc(lhsDims, memory::data_type::bf16, lhsStrides);
  primitive.rhs = memory::desc(rhsDims, memory::data_type::bf16, rhsStrides);
  primitive.out = memory::desc({s.batch, s.m, s.n},
                               s.f32Result ? memory::data_type::f32
                                           : memory::data_type::bf16,
                               memory::dims{s.m * s.n, s.n, 1});
  dnnl::primitive_attr attributes;
  if (s.addsToResult) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attributes.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc desc(
      dnnl::matmul::desc(primitive.lhs, primitive.rhs, primitive.out),
      attributes, engine());
  primitive.matmul = dnnl::matmul(desc);
  return primitive;
}

} // namespace

bool oneDnnHasBf16Matmul() {
  static const bool available = [] {
    try {
      build(MatmulShape{1, 16, 16, 16, false, false, true});
      return true;
    } catch (const dnnl::error &) {
      return false;
    }
  }();
  return available;
}

Status runMatmulBf16(const KernelArgs &args) {
  const Tensor &lhs = args.in(0), &rhs = args.in(1);
  Tensor &out = args.out(0);
  MatmulShape s;
  const MatmulParameters &parameters = parametersOf<MatmulParameters>(args);
  s.transposeLhs = parameters.transposeLhs;
  s.transposeRhs = parameters.transposeRhs;
  const std::vector<int64_t> &ls = lhs.shape(), &rs = rhs.shape();
  size_t rank = ls.size();
  s.m = ls[rank - (s.transposeLhs ? 1 : 2)];
  s.k = ls[rank - (s.transposeLhs ? 2 : 1)];
  s.n = rs[rs.size() - (s.transposeRhs ? 2 : 1)];
  s.batch = 1;
  for (size_t d = 0; d + 2 < rank; ++d)
    s.batch *= ls[d];
  s.sharedRhs = rs.size() == 2;
  bool accumulates = rowOf(args).effects.accumulates;
  s.f32Result = accumulates || parameters.f32Result;
  s.addsToResult = accumulates && !parameters.first;
  if (s.m == 0 || s.n == 0 || s.batch == 0)
    return Status::success();
  // A shared right-hand side with row-major lhs rows: one product over
  // every batch row at once.
  if (s.sharedRhs && !s.transposeLhs) {
    s.m *= s.batch;
    s.batch = 1;
  }
  static std::mutex mutex;
  static std::map<MatmulShape, Primitive> primitives;
  const Primitive *primitive;
  try {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = primitives.find(s);
    if (it == primitives.end())
      it = primitives.emplace(s, build(s)).first;
    primitive = &it->second;
    memory lhsMemory(primitive->lhs, engine(), const_cast<void *>(lhs.raw()));
    memory rhsMemory(primitive->rhs, engine(), const_cast<void *>(rhs.raw()));
    memory outMemory(primitive->out, engine(), out.raw());
    dnnl::stream stream(engine());
    primitive->matmul.execute(stream, {{DNNL_ARG_SRC, lhsMemory},
                                       {DNNL_ARG_WEIGHTS, rhsMemory},
                                       {DNNL_ARG_DST, outMemory}});
    stream.wait();
  } catch (const dnnl::error &error) {
    return Status::error("onednn: bf16 " + args.instruction.op + " [" +
                         std::to_string(s.batch) + ", " + std::to_string(s.m) +
                         ", " + std::to_string(s.k) + "] x [" +
                         std::to_string(s.k) + ", " + std::to_string(s.n) +
                         "] failed: " + error.what());
  }
  return Status::success();
}

} // namespace trellis::runtime::cpu
