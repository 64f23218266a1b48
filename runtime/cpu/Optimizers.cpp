//===- Optimizers.cpp - AdamW and SGD updates -----------------------------===//

#include "Kernels.h"

#include <algorithm>
#include <cmath>

namespace trellis::runtime::cpu {

namespace {

/// AdamW's constants for one step.
struct AdamW {
  double lr, decay, beta1, beta2, epsilon, correction1, correction2;
};

/// Elements [0, n) of one update, in double; cloned for AVX-512, where the
/// loop runs 8 lanes wide.
__attribute__((target_clones("avx512f", "default"))) void
adamwRange(const AdamW &a, const float *param, const float *grad,
           const float *m, const float *v, float *newParam, float *newM,
           float *newV, int64_t n) {
  // In-place updates pass the same arrays in and out; each element is
  // read before it is written and no other element is touched, so the
  // loop vectorizes (the compiler's own overlap check would refuse).
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    double g = grad[i];
    double mi = a.beta1 * m[i] + (1.0 - a.beta1) * g;
    double vi = a.beta2 * v[i] + (1.0 - a.beta2) * g * g;
    double update =
        (mi / a.correction1) / (std::sqrt(vi / a.correction2) + a.epsilon);
    newParam[i] =
        static_cast<float>(param[i] - a.lr * (update + a.decay * param[i]));
    newM[i] = static_cast<float>(mi);
    newV[i] = static_cast<float>(vi);
  }
}

/// Elements per task of the threaded updates: each element's update is
/// independent, so the split changes no result.
constexpr int64_t kChunk = 1 << 14;

} // namespace

Status runOptimizer(const KernelArgs &args) {
  const Instruction &instruction = args.instruction;
  double lr = instruction.real("learning_rate");
  double decay = instruction.real("weight_decay");
  const float *param = args.in(0).f32(), *grad = args.in(1).f32();
  int64_t n = args.in(0).size();
  int64_t chunks = (n + kChunk - 1) / kChunk;
  if (instruction.op == "sgd") {
    float *out = args.out(0).f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(param[i] - lr * (grad[i] + decay * param[i]));
    return Status::success();
  }
  double beta1 = instruction.real("beta1"), beta2 = instruction.real("beta2");
  double step = args.in(4).f32()[0];
  if (!(step >= 1))
    return Status::error("adamw: expected a step count >= 1, found " +
                         std::to_string(step));
  AdamW a{lr,
          decay,
          beta1,
          beta2,
          instruction.real("epsilon"),
          1.0 - std::pow(beta1, step),
          1.0 - std::pow(beta2, step)};
  const float *m = args.in(2).f32(), *v = args.in(3).f32();
  float *newParam = args.out(0).f32(), *newM = args.out(1).f32(),
        *newV = args.out(2).f32();
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    int64_t first = chunk * kChunk, count = std::min(kChunk, n - first);
    adamwRange(a, param + first, grad + first, m + first, v + first,
               newParam + first, newM + first, newV + first, count);
  }
  return Status::success();
}

} // namespace trellis::runtime::cpu
