//===- Optimizers.cpp - AdamW and SGD updates -----------------------------===//

#include "Kernels.h"
#include "trellis/Common/LearningRate.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace trellis::runtime::cpu {

namespace {

/// AdamW's constants for one step; `unscale` multiplies the gradient (1 /
/// grad_scale, else 1).
struct AdamW {
  double lr, decay, beta1, beta2, epsilon, correction1, correction2, unscale;
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
    double g = grad[i] * a.unscale;
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

/// One update's operands and constants.
struct Update {
  bool sgd = false;
  AdamW a{};
  const float *param = nullptr, *grad = nullptr, *m = nullptr, *v = nullptr;
  float *newParam = nullptr, *newM = nullptr, *newV = nullptr;
  int64_t n = 0;
  /// An update whose grad_scale is not finite: the results keep the
  /// operands' values.
  bool skipped = false;
};

StatusOr<Update> prepare(const KernelArgs &args) {
  const OptimizerParameters &parameters =
      parametersOf<OptimizerParameters>(args);
  Update update;
  update.sgd = rowOf(args).memberAs<OptimizerKind>() == OptimizerKind::Sgd;
  update.a.lr = parameters.learningRate;
  update.a.decay = parameters.weightDecay;
  update.param = args.in(0).f32();
  update.grad = args.in(1).f32();
  update.newParam = args.out(0).f32();
  update.n = args.in(0).size();
  update.a.unscale = 1.0;
  const OpContract &contract = rowOf(args);
  if (contract.hasGradientScale(args.instruction.inputs.size())) {
    double scale = args.in(contract.effects.gradientScaleOperand).f32()[0];
    update.skipped = !std::isfinite(scale);
    update.a.unscale = 1.0 / scale;
  }
  if (update.sgd)
    return update;
  double beta1 = parameters.beta1, beta2 = parameters.beta2;
  double step = args.in(4).f32()[0];
  if (!(step >= 1))
    return Status::error("adamw: expected a step count >= 1, found " +
                         std::to_string(step));
  // A scheduled rate: the schedule's at this step.
  // (The plan loader checked the schedule against the op table's row.)
  if (parameters.schedule)
    update.a.lr =
        learningRateAt(*parameters.schedule, static_cast<int64_t>(step));
  update.a.beta1 = beta1;
  update.a.beta2 = beta2;
  update.a.epsilon = parameters.epsilon;
  update.a.correction1 = 1.0 - std::pow(beta1, step);
  update.a.correction2 = 1.0 - std::pow(beta2, step);
  update.m = args.in(2).f32();
  update.v = args.in(3).f32();
  update.newM = args.out(1).f32();
  update.newV = args.out(2).f32();
  return update;
}

/// Copies `count` elements from `from` to `to` unless they are one array
/// (an update in place).
void keep(const float *from, float *to, int64_t count) {
  if (from != to)
    std::copy(from, from + count, to);
}

/// Elements [first, first + count) of `u`.
void runRange(const Update &u, int64_t first, int64_t count) {
  if (u.skipped) {
    keep(u.param + first, u.newParam + first, count);
    if (!u.sgd) {
      keep(u.m + first, u.newM + first, count);
      keep(u.v + first, u.newV + first, count);
    }
    return;
  }
  if (u.sgd) {
#pragma omp simd
    for (int64_t i = first; i < first + count; ++i)
      u.newParam[i] =
          static_cast<float>(u.param[i] - u.a.lr * (u.grad[i] * u.a.unscale +
                                                    u.a.decay * u.param[i]));
    return;
  }
  adamwRange(u.a, u.param + first, u.grad + first, u.m + first, u.v + first,
             u.newParam + first, u.newM + first, u.newV + first, count);
}

} // namespace

Status runOptimizers(const std::vector<KernelArgs> &updates) {
  std::vector<Update> prepared;
  prepared.reserve(updates.size());
  // (update, first element) of every chunk, in order.
  std::vector<std::pair<int32_t, int64_t>> chunks;
  for (const KernelArgs &args : updates) {
    StatusOr<Update> update = prepare(args);
    if (!update.ok())
      return update.status();
    for (int64_t first = 0; first < update->n; first += kChunk)
      chunks.emplace_back(static_cast<int32_t>(prepared.size()), first);
    prepared.push_back(*update);
  }
  int64_t count = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < count; ++c) {
    const Update &u = prepared[chunks[c].first];
    int64_t first = chunks[c].second;
    runRange(u, first, std::min(kChunk, u.n - first));
  }
  return Status::success();
}

Status runOptimizer(const KernelArgs &args) { return runOptimizers({args}); }

void registerOptimizerKernels(KernelTable &table) {
  table.addFamily(OpFamily::Optimizer, runOptimizer);
}

} // namespace trellis::runtime::cpu
