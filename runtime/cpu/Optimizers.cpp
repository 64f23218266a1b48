//===- Optimizers.cpp - AdamW and SGD updates -----------------------------===//

#include "Kernels.h"

#include <cmath>

namespace trellis::runtime::cpu {

Status runOptimizer(const KernelArgs &args) {
  const Instruction &instruction = args.instruction;
  double lr = instruction.real("learning_rate");
  double decay = instruction.real("weight_decay");
  const float *param = args.in(0).f32(), *grad = args.in(1).f32();
  int64_t n = args.in(0).size();
  if (instruction.op == "sgd") {
    float *out = args.out(0).f32();
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(param[i] - lr * (grad[i] + decay * param[i]));
    return Status::success();
  }
  double beta1 = instruction.real("beta1"), beta2 = instruction.real("beta2");
  double epsilon = instruction.real("epsilon");
  double step = args.in(4).f32()[0];
  if (!(step >= 1))
    return Status::error("adamw: expected a step count >= 1, found " +
                         std::to_string(step));
  double correction1 = 1.0 - std::pow(beta1, step);
  double correction2 = 1.0 - std::pow(beta2, step);
  const float *m = args.in(2).f32(), *v = args.in(3).f32();
  float *newParam = args.out(0).f32(), *newM = args.out(1).f32(),
        *newV = args.out(2).f32();
  for (int64_t i = 0; i < n; ++i) {
    double g = grad[i];
    double mi = beta1 * m[i] + (1.0 - beta1) * g;
    double vi = beta2 * v[i] + (1.0 - beta2) * g * g;
    double update =
        (mi / correction1) / (std::sqrt(vi / correction2) + epsilon);
    newParam[i] =
        static_cast<float>(param[i] - lr * (update + decay * param[i]));
    newM[i] = static_cast<float>(mi);
    newV[i] = static_cast<float>(vi);
  }
  return Status::success();
}

} // namespace trellis::runtime::cpu
