//===- StepMetric.h - How a step's figures are reported ---------*- C++ -*-===//
//
// A pass that adds a figure of the step to its results (the gradient norm,
// the experts' load) declares how it is reported: a label for the step
// line and a summary of its values. The plan carries the declaration
// (`"report": {"label": ..., "summary": ...}` beside `"metric"`), and the
// runtime reports every declared metric by it: the step line shows `label
// summary`, the metrics file the values and the summary, the C API and
// Python the values by name. A new metric is its pass alone. Shared by
// the compiler and the runtime; the C++ standard library only.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_STEPMETRIC_H
#define TRELLIS_COMMON_STEPMETRIC_H

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace trellis {

/// What the step line shows of a metric's values.
enum class MetricSummary {
  /// An f32 scalar, as it is.
  Value,
  /// Rows of counts (f32 [rows, columns]): the largest over the rows of
  /// the row's maximum over its mean (the experts' load imbalance); rows
  /// that sum to 0 are left out (0 when every row does).
  MaxOverMean,
};

/// `value`, `max_over_mean`: the summary's name in plans.
std::string_view metricSummaryName(MetricSummary summary);
/// The summary called `name`, or nullopt.
std::optional<MetricSummary> parseMetricSummary(std::string_view name);
/// The rank of the values `summary` reads: 0 (a scalar) or 2.
int64_t metricSummaryRank(MetricSummary summary);
/// `summary` of `values` of `shape` (a rank metricSummaryRank gives), or
/// nullopt when the values do not have that shape.
std::optional<double> summarizeMetric(MetricSummary summary,
                                      const std::vector<int64_t> &shape,
                                      const std::vector<float> &values);

} // namespace trellis

#endif // TRELLIS_COMMON_STEPMETRIC_H
