//===- GemmBenchmark.cpp - Our matmul kernel versus raw OpenBLAS ----------===//
//
// For the matrix products of a GPT-2 124M training step at batch 4, seq 256
// (1024 tokens), times a one-instruction plan through the runtime's
// executor and the same product as a bare cblas_sgemm call. The difference
// is the kernel's overhead (dispatch, layout handling).
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Plan.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

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

std::string planFor(const GemmShape &s) {
  auto shape = [](int64_t a, int64_t b) {
    return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
  };
  std::string lhs = s.transposeLhs ? shape(s.k, s.m) : shape(s.m, s.k);
  std::string rhs = s.transposeRhs ? shape(s.n, s.k) : shape(s.k, s.n);
  return R"({"format": "trellis-plan", "version": 2, "mesh": [{"name": "dp", "size": 1}],
    "buffers": [{"shape": )" +
         lhs + R"(, "dtype": "f32"}, {"shape": )" + rhs +
         R"(, "dtype": "f32"}, {"shape": )" + shape(s.m, s.n) +
         R"(, "dtype": "f32"}, {"shape": [], "dtype": "f32"}],
    "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones"},
                  {"buffer": 1, "role": "param", "param": "b", "init": "ones"}],
    "results": [{"buffer": 3, "role": "loss"}],
    "stages": [{"stage": 0, "program": [
      {"op": "matmul", "inputs": [0, 1], "outputs": [2],
       "attrs": {"transpose_lhs": )" +
         (s.transposeLhs ? "true" : "false") + R"(, "transpose_rhs": )" +
         (s.transposeRhs ? "true" : "false") + R"(}},
      {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1]}}]}]})";
}

void setFlops(benchmark::State &state, const GemmShape &s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::OneK::kIs1000);
  state.counters["GFLOP/s"].value /= 1e9;
}

void BM_TrellisMatmul(benchmark::State &state, GemmShape s) {
  StatusOr<Plan> plan = parsePlan(planFor(s));
  if (!plan.ok()) {
    state.SkipWithError(plan.status().message().c_str());
    return;
  }
  // Only the matmul: drop the reduction that makes the plan valid.
  plan->program.resize(1);
  StatusOr<std::unique_ptr<Device>> device =
      (*findBackend("cpu"))->createDevice({});
  StatusOr<std::unique_ptr<Executor>> executor =
      device.ok() ? Executor::create(std::move(*plan), **device)
                  : StatusOr<std::unique_ptr<Executor>>(device.status());
  if (!executor.ok()) {
    state.SkipWithError(executor.status().message().c_str());
    return;
  }
  for (auto _ : state) {
    Status status = (*executor)->run();
    benchmark::DoNotOptimize(status);
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

int registerAll() {
  for (const GemmShape &s : kShapes) {
    benchmark::RegisterBenchmark((std::string("trellis/") + s.name).c_str(),
                                 BM_TrellisMatmul, s)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("openblas/") + s.name).c_str(),
                                 BM_OpenBlasSgemm, s)
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}

int registered = registerAll();

} // namespace

BENCHMARK_MAIN();
