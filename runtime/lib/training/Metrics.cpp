//===- Metrics.cpp - trellis run's --metrics file -------------------------===//
//
// One JSON record a line, written by rank 0 as each step finishes: the
// loss, the rate, the memory, and the optional metrics the plan computes.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstring>
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
                         "': " + std::strerror(errno));
  return Status::success();
}

namespace {

/// A metric's values as JSON: a scalar as a number (null where it is not
/// finite, as an overflowing fp16 step's norm), rows as arrays.
nlohmann::json metricValues(const StepMetric &metric) {
  auto number = [](float value) {
    return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
  };
  if (metric.shape.empty())
    return number(metric.values.front());
  int64_t columns = metric.shape.back();
  nlohmann::json rows = nlohmann::json::array();
  for (size_t start = 0; start < metric.values.size(); start += columns)
    rows.push_back(std::vector<float>(metric.values.begin() + start,
                                      metric.values.begin() + start + columns));
  return rows;
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
  if (const DynamicLossScale *scale = trainer.lossScale()) {
    record["loss_scale"] = scale->scale;
    record["skipped_steps"] = scale->skippedSteps;
  }
  // Each metric the plan reports: its values under its name, and a
  // summary of rows as NAME_SUMMARY.
  for (const StepMetric &metric : trainer.metrics()) {
    if (!metric.present)
      continue;
    record[metric.name] = metricValues(metric);
    if (metric.report.summary != MetricSummary::Value)
      if (std::optional<double> summary = metric.summary())
        record[metric.name + "_" +
               std::string(metricSummaryName(metric.report.summary))] =
            *summary;
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
