//===- Metrics.cpp - trellis run's --metrics file -------------------------===//
//
// One JSON record a line, written by rank 0 as each step finishes: the
// loss, the rate, the memory, and the optional metrics the plan computes.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include <sys/resource.h>

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

namespace trellis::runtime {

Status openMetrics(const TrainOptions &options, std::ofstream &metrics) {
  if (options.metricsPath.empty() ||
      !(options.rank == 0 || (options.rank < 0 && options.nodeRank == 0)))
    return Status::success();
  metrics.open(options.metricsPath,
               options.loadDir.empty() ? std::ios::trunc : std::ios::app);
  if (!metrics)
    return Status::error("--metrics: cannot write '" + options.metricsPath +
                         "'");
  return Status::success();
}

namespace {

/// [layers x experts] as one array of counts a layer.
nlohmann::json expertLoadByLayer(const Trainer &trainer) {
  size_t experts = trainer.lastExpertLoad().size() / trainer.expertLoadLayers();
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t layer = 0; layer < trainer.expertLoadLayers(); ++layer)
    layers.push_back(std::vector<float>(
        trainer.lastExpertLoad().begin() + layer * experts,
        trainer.lastExpertLoad().begin() + (layer + 1) * experts));
  return layers;
}

} // namespace

Status writeMetricsRecord(std::ofstream &metrics, Trainer &trainer,
                          const TrainOptions &options,
                          const StepOutcome &outcome) {
  struct rusage now;
  getrusage(RUSAGE_SELF, &now);
  nlohmann::json record = {
      {"step", outcome.step},
      {"loss", trainer.lastLoss()},
      {"tokens_per_s", trainer.tokensPerStep() / outcome.seconds},
      {"step_ms", outcome.seconds * 1e3},
      {"skipped", outcome.skipped},
      {"peak_memory_mib", now.ru_maxrss / 1024.0}};
  if (std::optional<double> rate = trainer.lastLearningRate())
    record["lr"] = *rate;
  // A norm that is not finite (an overflowing fp16 step) is null.
  if (std::optional<double> norm = trainer.lastGradNorm())
    record["grad_norm"] =
        std::isfinite(*norm) ? nlohmann::json(*norm) : nlohmann::json();
  if (const DynamicLossScale *scale = trainer.lossScale()) {
    record["loss_scale"] = scale->scale;
    record["skipped_steps"] = scale->skippedSteps;
  }
  if (std::optional<double> balance = trainer.lastExpertImbalance()) {
    record["expert_load_max_over_mean"] = *balance;
    record["expert_load"] = expertLoadByLayer(trainer);
  }
  if (outcome.evalLoss)
    record["eval_loss"] = *outcome.evalLoss;
  metrics << record.dump() << "\n" << std::flush;
  if (!metrics)
    return Status::error("--metrics: cannot write '" + options.metricsPath +
                         "'");
  return Status::success();
}

} // namespace trellis::runtime
