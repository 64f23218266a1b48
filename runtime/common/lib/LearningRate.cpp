//===- LearningRate.cpp - Learning-rate schedules -------------------------===//

#include "trellis/Common/LearningRate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace trellis {

namespace {

constexpr std::pair<std::string_view, LrScheduleKind> kKinds[] = {
    {"constant", LrScheduleKind::Constant},
    {"linear", LrScheduleKind::Linear},
    {"cosine", LrScheduleKind::Cosine},
    {"wsd", LrScheduleKind::Wsd},
};

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

} // namespace

std::string_view lrScheduleName(LrScheduleKind kind) {
  for (const auto &[name, named] : kKinds)
    if (named == kind)
      return name;
  return "";
}

std::optional<LrScheduleKind> parseLrScheduleKind(std::string_view name) {
  for (const auto &[known, kind] : kKinds)
    if (known == name)
      return kind;
  return std::nullopt;
}

std::string checkLrSchedule(const LrSchedule &s) {
  if (!std::isfinite(s.peak) || s.peak <= 0)
    return "--lr: expected a finite rate > 0, found " + number(s.peak);
  if (!std::isfinite(s.minimum) || s.minimum < 0 || s.minimum > s.peak)
    return "--min-lr: expected a rate in [0, --lr " + number(s.peak) +
           "], found " + number(s.minimum);
  if (s.warmupSteps < 0)
    return "--warmup-steps: expected a count >= 0, found " +
           std::to_string(s.warmupSteps);
  // Step counts a double holds exactly (the rate's ratios are doubles,
  // and so are plans' JSON numbers to some readers): 2^53 steps outlast
  // any run.
  constexpr int64_t kMaxSteps = int64_t(1) << 53;
  for (auto [flag, steps] : {std::pair{"--warmup-steps", s.warmupSteps},
                             std::pair{"--decay-steps", s.decaySteps},
                             std::pair{"--wsd-decay-steps", s.wsdDecaySteps}})
    if (steps > kMaxSteps)
      return std::string(flag) + ": expected at most 2^53 (" +
             std::to_string(kMaxSteps) + ") steps, found " +
             std::to_string(steps);
  if (s.kind == LrScheduleKind::Constant)
    return "";
  if (s.decaySteps <= s.warmupSteps)
    return "--decay-steps: expected the step the decay ends at, after the " +
           std::to_string(s.warmupSteps) + " warmup steps, found " +
           std::to_string(s.decaySteps);
  if (s.kind == LrScheduleKind::Wsd &&
      (s.wsdDecaySteps < 1 || s.wsdDecaySteps > s.decaySteps - s.warmupSteps))
    return "--wsd-decay-steps: expected 1 to " +
           std::to_string(s.decaySteps - s.warmupSteps) +
           " (the steps between warmup and --decay-steps), found " +
           std::to_string(s.wsdDecaySteps);
  return "";
}

} // namespace trellis
