//===- StepResults.cpp - Results a pass adds to a training step -----------===//

#include "StepResults.h"

#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

using namespace mlir;
using namespace trellis::graph;

void trellis::appendStepResult(func::FuncOp step, Value value,
                               DictionaryAttr attrs) {
  Builder builder(step.getContext());
  Operation *terminator = step.getBody().front().getTerminator();
  terminator->insertOperands(terminator->getNumOperands(), value);
  SmallVector<Type> results(step.getResultTypes());
  results.push_back(value.getType());
  SmallVector<DictionaryAttr> resultAttrs;
  step.getAllResultAttrs(resultAttrs);
  resultAttrs.push_back(attrs);
  step.setType(builder.getFunctionType(step.getArgumentTypes(), results));
  step.setAllResultAttrs(resultAttrs);
}

void trellis::appendMetricResult(func::FuncOp step, Value value,
                                 llvm::StringRef metric,
                                 std::optional<MetricReport> report) {
  Builder builder(step.getContext());
  SmallVector<NamedAttribute> attrs{builder.getNamedAttr(
      GraphDialect::kMetricAttrName, builder.getStringAttr(metric))};
  if (report)
    attrs.push_back(builder.getNamedAttr(
        GraphDialect::kReportAttrName,
        builder.getDictionaryAttr(
            {builder.getNamedAttr("label",
                                  builder.getStringAttr(report->label)),
             builder.getNamedAttr("summary",
                                  builder.getStringAttr(std::string(
                                      metricSummaryName(report->summary))))})));
  appendStepResult(step, value, builder.getDictionaryAttr(attrs));
}

Value trellis::stepExpertCounts(OpBuilder &builder, MoeRouteOp route,
                                int64_t experts) {
  Value counts;
  for (Operation *user : route.getExperts().getUsers())
    if (auto existing = llvm::dyn_cast<ExpertCountsOp>(user))
      if (static_cast<int64_t>(existing.getNumExperts()) == experts)
        counts = existing;
  if (!counts) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointAfter(route);
    auto made = ExpertCountsOp::create(builder, route.getLoc(),
                                       route.getExperts(), experts);
    copyPlacement(route, made);
    counts = made;
  }
  // A micro-batch's counts, summed over the step's micro-batches (once: a
  // sum another pass made serves again).
  auto step = route->getParentOfType<func::FuncOp>();
  if (step->hasAttr(GraphDialect::kMicroBatchesAttrName) &&
      counts.getDefiningOp()->hasAttr(GraphDialect::kPhaseAttrName)) {
    for (Operation *user : counts.getUsers())
      if (auto sum = llvm::dyn_cast<MicrobatchSumOp>(user))
        return sum;
    auto total = MicrobatchSumOp::create(builder, route.getLoc(), counts);
    setModelPart(total, getModelPart(route));
    counts = total;
  }
  return counts;
}
