//===- StepMetric.cpp - How a step's figures are reported -----------------===//

#include "trellis/Common/StepMetric.h"

#include <algorithm>

namespace trellis {

std::string_view metricSummaryName(MetricSummary summary) {
  switch (summary) {
  case MetricSummary::Value:
    return "value";
  case MetricSummary::MaxOverMean:
    return "max_over_mean";
  }
  return "";
}

std::optional<MetricSummary> parseMetricSummary(std::string_view name) {
  for (MetricSummary summary :
       {MetricSummary::Value, MetricSummary::MaxOverMean})
    if (name == metricSummaryName(summary))
      return summary;
  return std::nullopt;
}

int64_t metricSummaryRank(MetricSummary summary) {
  return summary == MetricSummary::Value ? 0 : 2;
}

std::optional<double> summarizeMetric(MetricSummary summary,
                                      const std::vector<int64_t> &shape,
                                      const std::vector<float> &values) {
  switch (summary) {
  case MetricSummary::Value:
    if (values.size() != 1)
      return std::nullopt;
    return values.front();
  case MetricSummary::MaxOverMean: {
    if (shape.size() != 2 ||
        shape[0] * shape[1] != static_cast<int64_t>(values.size()) ||
        shape[1] == 0)
      return std::nullopt;
    double worst = 0;
    for (int64_t row = 0; row < shape[0]; ++row) {
      const float *begin = values.data() + row * shape[1];
      double sum = 0, most = 0;
      for (int64_t column = 0; column < shape[1]; ++column) {
        sum += begin[column];
        most = std::max<double>(most, begin[column]);
      }
      if (sum > 0)
        worst = std::max(worst, most / (sum / shape[1]));
    }
    return worst;
  }
  }
  return std::nullopt;
}

} // namespace trellis
