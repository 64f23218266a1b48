//===- GemmBenchmark.cpp - Matmul kernels versus the raw libraries --------===//
//
// For the matrix products of a GPT-2 124M training step at batch 4, seq 256
// (1024 tokens): the CPU backend's matmul kernel in f32 (oneDNN's sgemm)
// and in bf16 (oneDNN's matmul, AMX where the CPU has it), against a bare
// OpenBLAS cblas_sgemm, a bare dnnl_sgemm and a bare oneDNN f32 matmul on
// the same shapes. The kernel-versus-library gap is the kernel's overhead
// (dispatch, layout handling). TRELLIS_THREADS (default 1) sets the threads
// of all of them (the device's OpenMP pool, which oneDNN and OpenMP
// OpenBLAS share): run it under `taskset` with 1 and then 2 to see what a
// second core gives the products themselves.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dnnl.hpp>

#include <cstdlib>
#include <string>
#include <vector>

using namespace trellis::runtime;

namespace {

struct GemmShape {
  const char *name;
  int64_t m, k, n;
  bool transposeLhs, transposeRhs;
};

// Forward products, and the weight-gradient products (x^T dy) of backward.
const GemmShape kShapes[] = {
    {"qkv", 1024, 768, 2304, false, false},
    {"attn_proj", 1024, 768, 768, false, false},
    {"mlp_up", 1024, 768, 3072, false, false},
    {"mlp_down", 1024, 3072, 768, false, false},
    {"qkv_weight_grad", 768, 1024, 2304, true, false},
    {"mlp_up_input_grad", 1024, 3072, 768, false, true},
    {"lm_head", 1024, 768, 50257, false, true},
};

/// TRELLIS_THREADS, or 1.
int benchmarkThreads() {
  const char *value = std::getenv("TRELLIS_THREADS");
  int threads = value ? std::atoi(value) : 1;
  return threads > 0 ? threads : 1;
}

void setFlops(benchmark::State &state, const GemmShape &s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * s.m * s.k * s.n, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::OneK::kIs1000);
  state.counters["GFLOP/s"].value /= 1e9;
}

/// One matmul instruction through the CPU backend, operands of `dtype`.
void BM_TrellisMatmul(benchmark::State &state, GemmShape s, DType dtype) {
  StatusOr<std::unique_ptr<Device>> device =
      (*findBackend("cpu"))->createDevice({benchmarkThreads()});
  if (!device.ok()) {
    state.SkipWithError(device.status().message().c_str());
    return;
  }
  std::vector<int64_t> lhsShape = s.transposeLhs
                                      ? std::vector<int64_t>{s.k, s.m}
                                      : std::vector<int64_t>{s.m, s.k};
  std::vector<int64_t> rhsShape = s.transposeRhs
                                      ? std::vector<int64_t>{s.n, s.k}
                                      : std::vector<int64_t>{s.k, s.n};
  std::vector<std::unique_ptr<DeviceAllocation>> memory;
  std::vector<Tensor> buffers;
  for (const std::vector<int64_t> &shape :
       {lhsShape, rhsShape, std::vector<int64_t>{s.m, s.n}}) {
    BufferDesc desc{shape, dtype};
    memory.push_back(
        std::move(*(*device)->allocate(desc.numElements() * dtypeBytes(dtype))));
    buffers.emplace_back(desc, memory.back()->data());
  }
  Instruction instruction;
  instruction.op = "matmul";
  instruction.inputs = {0, 1};
  instruction.outputs = {2};
  AttrValue flag;
  flag.kind = AttrValue::Kind::Bool;
  flag.flag = s.transposeLhs;
  instruction.attrs["transpose_lhs"] = flag;
  flag.flag = s.transposeRhs;
  instruction.attrs["transpose_rhs"] = flag;
  AxisList axes;
  for (auto _ : state) {
    Status status = (*device)->launch(KernelArgs{instruction, buffers, axes});
    if (!status.ok()) {
      state.SkipWithError(status.message().c_str());
      return;
    }
  }
  setFlops(state, s);
}

void BM_OpenBlasSgemm(benchmark::State &state, GemmShape s) {
  std::vector<float> a(s.m * s.k, 1.0f), b(s.k * s.n, 1.0f), c(s.m * s.n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, s.transposeLhs ? CblasTrans : CblasNoTrans,
                s.transposeRhs ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
                a.data(), s.transposeLhs ? s.m : s.k, b.data(),
                s.transposeRhs ? s.k : s.n, 0.0f, c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
  setFlops(state, s);
}

/// oneDNN's BLAS-style sgemm (row-major), the f32 kernels' library where
/// OpenBLAS does not know the CPU.
void BM_OneDnnSgemm(benchmark::State &state, GemmShape s) {
  std::vector<float> a(s.m * s.k, 1.0f), b(s.k * s.n, 1.0f), c(s.m * s.n);
  for (auto _ : state) {
    dnnl_sgemm(s.transposeLhs ? 'T' : 'N', s.transposeRhs ? 'T' : 'N', s.m,
               s.n, s.k, 1.0f, a.data(), s.transposeLhs ? s.m : s.k, b.data(),
               s.transposeRhs ? s.k : s.n, 0.0f, c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
  setFlops(state, s);
}

void BM_OneDnnF32(benchmark::State &state, GemmShape s) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  memory::desc a({s.m, s.k}, memory::data_type::f32,
                 s.transposeLhs ? memory::dims{1, s.m}
                                : memory::dims{s.k, 1});
  memory::desc b({s.k, s.n}, memory::data_type::f32,
                 s.transposeRhs ? memory::dims{1, s.k}
                                : memory::dims{s.n, 1});
  memory::desc c({s.m, s.n}, memory::data_type::f32, memory::dims{s.n, 1});
  dnnl::matmul::primitive_desc desc(dnnl::matmul::desc(a, b, c), engine);
  dnnl::matmul matmul(desc);
  memory am(a, engine), bm(b, engine), cm(c, engine);
  state.SetLabel(desc.impl_info_str());
  for (auto _ : state) {
    matmul.execute(stream, {{DNNL_ARG_SRC, am},
                            {DNNL_ARG_WEIGHTS, bm},
                            {DNNL_ARG_DST, cm}});
    stream.wait();
  }
  setFlops(state, s);
}

int registerAll() {
  // Every benchmark's pool: the device sets the OpenMP threads.
  if (!(*findBackend("cpu"))->createDevice({benchmarkThreads()}).ok())
    return 1;
  for (const GemmShape &s : kShapes) {
    benchmark::RegisterBenchmark((std::string("trellis-f32/") + s.name).c_str(),
                                 BM_TrellisMatmul, s, DType::F32)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        (std::string("trellis-bf16/") + s.name).c_str(), BM_TrellisMatmul, s,
        DType::BF16)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("openblas/") + s.name).c_str(),
                                 BM_OpenBlasSgemm, s)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        (std::string("onednn-sgemm/") + s.name).c_str(), BM_OneDnnSgemm, s)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("onednn-f32/") + s.name).c_str(),
                                 BM_OneDnnF32, s)
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}

int registered = registerAll();

} // namespace

BENCHMARK_MAIN();
