//===- StepResults.h - Results a pass adds to a training step ---*- C++ -*-===//

#ifndef TRELLIS_LIB_AUTODIFF_STEPRESULTS_H
#define TRELLIS_LIB_AUTODIFF_STEPRESULTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "trellis/Common/StepMetric.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace trellis {
namespace graph {
class MoeRouteOp;
} // namespace graph

/// Appends `value` to `step`'s results with the result attributes `attrs`.
void appendStepResult(mlir::func::FuncOp step, mlir::Value value,
                      mlir::DictionaryAttr attrs);

/// How the runtime reports a metric after each step: the step line's
/// label and the summary it shows (trellis/Common/StepMetric.h); the
/// metrics file holds the values too.
struct MetricReport {
  llvm::StringRef label;
  MetricSummary summary = MetricSummary::Value;
};

/// Appends `value` to `step`'s results, marked graph.metric = `metric`
/// and, when `report` is given, graph.report: the runtime reports it with
/// each step by that declaration alone.
void appendMetricResult(mlir::func::FuncOp step, mlir::Value value,
                        llvm::StringRef metric,
                        std::optional<MetricReport> report);

/// How many of the step's slots `route` sent to each of its `experts`
/// ([experts] f32, summed over the micro-batches of a micro-batched step):
/// the layer's graph.expert_counts (its load-balancing loss's) or a new
/// one after the route, and its sum over micro-batches (an existing one,
/// or a new one at `builder`'s insertion point, the step's end).
mlir::Value stepExpertCounts(mlir::OpBuilder &builder, graph::MoeRouteOp route,
                             int64_t experts);

} // namespace trellis

#endif // TRELLIS_LIB_AUTODIFF_STEPRESULTS_H
