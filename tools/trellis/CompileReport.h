//===- CompileReport.h - trellis compile --report and --report-json -*- C++ -*-===//

#ifndef TRELLIS_TOOLS_TRELLIS_COMPILEREPORT_H
#define TRELLIS_TOOLS_TRELLIS_COMPILEREPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "trellis/Analysis/StepReport.h"

#include <string>
#include <utility>
#include <vector>

namespace trellis::driver {

/// The report of each rank kind: the one step (stage -1), or each pipeline
/// stage's ranks over the stage's schedule.
struct RankReport {
  int64_t stage = -1;
  StepReport report;
};

/// Reports of an unstaged step.
std::vector<RankReport> reportStep(mlir::func::FuncOp step);
/// Reports of the stage functions of a staged step (`microBatches` per
/// step); without `withMemoryPlan`, no arena placement (faster).
std::vector<RankReport> reportStages(llvm::ArrayRef<mlir::func::FuncOp> stages,
                                     int64_t microBatches,
                                     bool withMemoryPlan = true);

/// Prints every report (--report).
void printReports(const std::vector<RankReport> &reports);

/// Writes docs/Report.md's JSON: the model's parameter count, the mesh, and
/// each rank kind's entry. False (message printed) if `path` cannot be
/// written.
bool writeReportJson(const std::string &path, int64_t modelParameters,
                     const std::vector<std::pair<std::string, int64_t>> &mesh,
                     const std::vector<RankReport> &reports);

/// ZeRO-2 and ZeRO-3 with a pipeline communicate per micro-batch: one
/// warning line with the data-parallel traffic per step against what
/// ZeRO-1 would move (its gradients reduce-scattered and its parameters
/// gathered once per step).
void warnPipelinedZero(int64_t zeroStage, int64_t microBatches,
                       int64_t dataParallel,
                       const std::vector<RankReport> &reports);

} // namespace trellis::driver

#endif // TRELLIS_TOOLS_TRELLIS_COMPILEREPORT_H
