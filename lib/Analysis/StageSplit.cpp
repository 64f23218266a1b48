//===- StageSplit.cpp - Layers of a model divided into pipeline stages ----===//

#include "trellis/Analysis/StageSplit.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace trellis {

namespace {

bool fail(std::string *error, std::string message) {
  if (error)
    *error = std::move(message);
  return false;
}

/// Splits layers [0, n) into `stages` contiguous runs of >= 1 layer that
/// minimize the largest value of `measure` over stages, subject to
/// `admissible` on every stage. `measure(first, last, stage)` and
/// `admissible(first, last, stage)` see layers [first, last) on `stage`.
/// Returns nothing when no split is admissible.
template <typename Measure, typename Admissible>
std::optional<StageLayers> minMaxSplit(int64_t n, int64_t stages,
                                       Measure measure, Admissible admissible) {
  const double infinity = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest largest measure of stages 0..s-1 holding
  // layers [0, i); cut[s][i]: where stage s-1 starts in that split.
  std::vector<std::vector<double>> best(stages + 1,
                                        std::vector<double>(n + 1, infinity));
  std::vector<std::vector<int64_t>> cut(stages + 1,
                                        std::vector<int64_t>(n + 1, -1));
  best[0][0] = 0;
  for (int64_t s = 1; s <= stages; ++s) {
    for (int64_t i = s; i <= n - (stages - s); ++i) {
      for (int64_t j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == infinity || !admissible(j, i, s - 1))
          continue;
        double value = std::max(best[s - 1][j], measure(j, i, s - 1));
        if (value < best[s][i]) {
          best[s][i] = value;
          cut[s][i] = j;
        }
      }
    }
  }
  if (best[stages][n] == infinity)
    return std::nullopt;
  StageLayers split(stages);
  for (int64_t s = stages, i = n; s > 0; --s) {
    split[s - 1] = i - cut[s][i];
    i = cut[s][i];
  }
  return split;
}

} // namespace

std::optional<StageLayers> balanceStages(const StagedModelCost &model,
                                         int64_t stages, std::string *error) {
  int64_t n = static_cast<int64_t>(model.layers.size());
  if (stages < 1) {
    fail(error,
         "expected at least 1 pipeline stage, found " + std::to_string(stages));
    return std::nullopt;
  }
  if (n < stages) {
    fail(error, "expected at least one layer per pipeline stage: " +
                    std::to_string(stages) + " stages, but the model has " +
                    std::to_string(n) + " layers");
    return std::nullopt;
  }
  std::vector<PartCost> prefix(n + 1);
  for (int64_t i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i];
    prefix[i + 1] += model.layers[i];
  }
  auto cost = [&](int64_t first, int64_t last, int64_t stage) {
    PartCost total{prefix[last].time - prefix[first].time,
                   prefix[last].memory - prefix[first].memory};
    if (stage == 0)
      total += model.embedding;
    if (stage == stages - 1)
      total += model.head;
    return total;
  };
  auto time = [&](int64_t first, int64_t last, int64_t stage) {
    return cost(first, last, stage).time;
  };
  auto memory = [&](int64_t first, int64_t last, int64_t stage) {
    return cost(first, last, stage).memory;
  };
  auto anything = [](int64_t, int64_t, int64_t) { return true; };
  std::optional<StageLayers> fastest = minMaxSplit(n, stages, time, anything);
  // Among the splits whose slowest stage is within 1% of the fastest split's,
  // the one that needs the least memory on its fullest stage.
  double slowest = 0;
  for (const PartCost &stage : stageCosts(model, *fastest))
    slowest = std::max(slowest, stage.time);
  double bound = slowest * 1.01 + 1e-12;
  auto fastEnough = [&](int64_t first, int64_t last, int64_t stage) {
    return time(first, last, stage) <= bound;
  };
  std::optional<StageLayers> leanest =
      minMaxSplit(n, stages, memory, fastEnough);
  return leanest ? leanest : fastest;
}

bool verifyStageLayers(const StageLayers &split, int64_t numLayers,
                       int64_t stages, std::string *error) {
  if (static_cast<int64_t>(split.size()) != stages)
    return fail(error, "expected " + std::to_string(stages) +
                           " layer counts (one per pipeline stage), found " +
                           std::to_string(split.size()));
  int64_t total = 0;
  for (size_t stage = 0; stage < split.size(); ++stage) {
    if (split[stage] < 1)
      return fail(error, "stage " + std::to_string(stage) +
                             " has no layer: expected at least 1, found " +
                             std::to_string(split[stage]));
    total += split[stage];
  }
  if (total != numLayers)
    return fail(error, "expected layer counts summing to the model's " +
                           std::to_string(numLayers) + " layers, found " +
                           std::to_string(total));
  return true;
}

std::optional<StageLayers> parseStageLayers(const std::string &text,
                                            std::string *error) {
  StageLayers split;
  size_t position = 0;
  while (true) {
    size_t end = text.find(',', position);
    std::string item =
        text.substr(position, end == std::string::npos ? std::string::npos
                                                       : end - position);
    bool digits = !item.empty() && item.size() <= 9 &&
                  std::all_of(item.begin(), item.end(), [](char c) {
                    return std::isdigit(static_cast<unsigned char>(c));
                  });
    if (!digits) {
      fail(error, "expected layer counts like 6,7,7,6, found '" + text + "'");
      return std::nullopt;
    }
    split.push_back(std::stoll(item));
    if (end == std::string::npos)
      return split;
    position = end + 1;
  }
}

StageLayers refineStagesBySimulation(const StagedModelCost &model,
                                     StageLayers split,
                                     const PipelineStreams &streams,
                                     const PipelineShape &shape,
                                     double forwardShare) {
  auto makespanOf = [&](const StageLayers &candidate) {
    PipelineCosts costs;
    for (const PartCost &stage : stageCosts(model, candidate)) {
      costs.forwardByStage.push_back(stage.time * forwardShare);
      costs.backwardByStage.push_back(stage.time * (1 - forwardShare));
    }
    std::optional<PipelineSimulation> simulation =
        simulateSchedule(streams, shape, costs, nullptr);
    return simulation ? simulation->makespan
                      : std::numeric_limits<double>::infinity();
  };
  double best = makespanOf(split);
  // Each accepted move shortens the makespan, so the loop ends; the bound
  // only guards against floating-point ties.
  for (size_t round = 0; round < 64 * split.size(); ++round) {
    StageLayers bestCandidate;
    double bestCandidateMakespan = best * (1 - 1e-9);
    for (size_t boundary = 0; boundary + 1 < split.size(); ++boundary) {
      for (int direction : {-1, 1}) {
        StageLayers candidate = split;
        candidate[boundary] += direction;
        candidate[boundary + 1] -= direction;
        if (candidate[boundary] < 1 || candidate[boundary + 1] < 1)
          continue;
        double makespan = makespanOf(candidate);
        if (makespan < bestCandidateMakespan) {
          bestCandidateMakespan = makespan;
          bestCandidate = std::move(candidate);
        }
      }
    }
    if (bestCandidate.empty())
      break;
    split = std::move(bestCandidate);
    best = bestCandidateMakespan;
  }
  return split;
}

std::vector<PartCost> stageCosts(const StagedModelCost &model,
                                 const StageLayers &split) {
  std::vector<PartCost> costs(split.size());
  size_t layer = 0;
  for (size_t stage = 0; stage < split.size(); ++stage) {
    for (int64_t i = 0; i < split[stage]; ++i)
      costs[stage] += model.layers[layer++];
  }
  if (!costs.empty()) {
    costs.front() += model.embedding;
    costs.back() += model.head;
  }
  return costs;
}

std::optional<StageLayers>
chooseStageLayers(const StagedModelCost &model, const std::string &given,
                  const PipelineStreams &streams, const PipelineShape &shape,
                  double forwardShare, std::string *error) {
  int64_t stages = shape.virtualStages();
  if (!given.empty()) {
    std::optional<StageLayers> split = parseStageLayers(given, error);
    if (!split ||
        !verifyStageLayers(*split, model.layers.size(), stages, error)) {
      if (error)
        *error = "--pp-layers: " + *error;
      return std::nullopt;
    }
    return split;
  }
  std::optional<StageLayers> split = balanceStages(model, stages, error);
  if (!split)
    return std::nullopt;
  return refineStagesBySimulation(model, *split, streams, shape, forwardShare);
}

} // namespace trellis
