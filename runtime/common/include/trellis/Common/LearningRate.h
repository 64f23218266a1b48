//===- LearningRate.h - Learning-rate schedules -----------------*- C++ -*-===//
//
// The learning rate of step t (counted from 1) under a schedule, as
// Megatron-LM's OptimizerParamScheduler and Hugging Face's schedules define
// it. The optimizer kernels compute it from the step count the plan feeds
// them (no recompilation, and a resumed run continues exactly); the trainer
// prints the same number. Plain C++, shared by compiler and runtime.
//
// With peak rate P, minimum M, W warmup steps and decay ending at step D:
//   warmup (t <= W):  P * t / W
//   constant:         P
//   linear:           P - (P - M) * r,              r = (t - W) / (D - W)
//   cosine:           M + (P - M) * (1 + cos(pi r)) / 2
//   wsd:              P until step D - N, then cosine from P to M over the
//                     last N steps (N = `wsdDecaySteps`: warmup, stable,
//                     decay), r = (t - (D - N)) / N
// r is clamped to [0, 1]: after step D the rate stays M.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_LEARNINGRATE_H
#define TRELLIS_COMMON_LEARNINGRATE_H

#include "trellis/Common/HostDevice.h"

#include <math.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trellis {

enum class LrScheduleKind { Constant, Linear, Cosine, Wsd };

/// `constant`, `linear`, `cosine`, `wsd`.
std::string_view lrScheduleName(LrScheduleKind kind);
std::optional<LrScheduleKind> parseLrScheduleKind(std::string_view name);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double peak = 1e-3;
  double minimum = 0;
  int64_t warmupSteps = 0;
  /// The step at which the decay ends (warmup included), for linear,
  /// cosine and wsd.
  int64_t decaySteps = 0;
  /// wsd: the steps of the decay, the last before decaySteps.
  int64_t wsdDecaySteps = 0;
};

/// "" when `schedule` is one the formulas above define, else what was
/// expected and found (naming the driver's flags: --warmup-steps, ...).
std::string checkLrSchedule(const LrSchedule &schedule);

/// The rate of step `step` (from 1). Precondition: checkLrSchedule is "".
TRELLIS_HOST_DEVICE inline double learningRateAt(const LrSchedule &s,
                                                 int64_t step) {
  if (step <= s.warmupSteps && s.warmupSteps > 0)
    return s.peak * double(step) / double(s.warmupSteps);
  // The share of [begin, begin + length) behind `step`, in [0, 1].
  auto ratio = [&](int64_t begin, int64_t length) {
    return fmin(fmax(double(step - begin) / double(length), 0.0), 1.0);
  };
  auto cosine = [&](double r) {
    return s.minimum +
           (s.peak - s.minimum) * 0.5 * (1.0 + cos(3.14159265358979323846 * r));
  };
  switch (s.kind) {
  case LrScheduleKind::Constant:
    return s.peak;
  case LrScheduleKind::Linear:
    return s.peak - (s.peak - s.minimum) *
                        ratio(s.warmupSteps, s.decaySteps - s.warmupSteps);
  case LrScheduleKind::Cosine:
    return cosine(ratio(s.warmupSteps, s.decaySteps - s.warmupSteps));
  case LrScheduleKind::Wsd:
    return cosine(ratio(s.decaySteps - s.wsdDecaySteps, s.wsdDecaySteps));
  }
  return s.peak;
}

/// The schedule an optimizer op's attributes describe (`lr_schedule`,
/// `learning_rate` its peak, `warmup_steps`, `decay_steps`,
/// `wsd_decay_steps`, `min_lr`), read through `attrs`' text, integer and
/// real accessors (the op table's OpInstance, the runtime's Instruction);
/// nullopt when `lr_schedule` names no kind.
template <typename Attributes>
std::optional<LrSchedule> lrScheduleFromAttributes(const Attributes &attrs) {
  std::optional<LrScheduleKind> kind =
      parseLrScheduleKind(attrs.text("lr_schedule"));
  if (!kind)
    return std::nullopt;
  LrSchedule schedule;
  schedule.kind = *kind;
  schedule.peak = attrs.real("learning_rate");
  schedule.minimum = attrs.real("min_lr");
  schedule.warmupSteps = attrs.integer("warmup_steps");
  schedule.decaySteps = attrs.integer("decay_steps");
  schedule.wsdDecaySteps = attrs.integer("wsd_decay_steps");
  return schedule;
}

} // namespace trellis

#endif // TRELLIS_COMMON_LEARNINGRATE_H
