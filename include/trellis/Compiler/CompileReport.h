//===- CompileReport.h - Per-rank reports of a compiled step ---*- C++ -*-===//
//
// What `trellis compile --report` prints and --report-json writes
// (docs/Report.md), from the compiled step or its stage functions.
//

#ifndef TRELLIS_COMPILER_COMPILEREPORT_H
#define TRELLIS_COMPILER_COMPILEREPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "trellis/Analysis/StepReport.h"
#include "trellis/Common/Mesh.h"
#include "trellis/Sharding/ShardingCost.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <utility>
#include <vector>

namespace trellis {

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
void printReports(const std::vector<RankReport> &reports,
                  llvm::raw_ostream &os);

/// docs/Report.md's JSON: the model's parameter count, the mesh (its axes
/// of more than one rank, with their roles), and each rank kind's entry.
llvm::json::Value reportJson(int64_t modelParameters,
                             const std::vector<MeshAxis> &mesh,
                             const std::vector<RankReport> &reports);

/// `--emit estimate`'s JSON (docs/Report.md): the model's parameter count,
/// the mesh as reportJson writes it, and each pipeline rank's priced cost.
llvm::json::Value estimateJson(int64_t modelParameters,
                               const std::vector<MeshAxis> &mesh,
                               const std::vector<ShardedStepCost> &costs);

/// ZeRO-2 and ZeRO-3 with a pipeline communicate per micro-batch: a warning
/// with the data-parallel traffic per step (the reduce-scatters and
/// all-gathers over any of the mesh axes `zeroAxes`, `zeroRanks` ranks
/// together) against what ZeRO-1 would move (its gradients
/// reduce-scattered and its parameters gathered once per step); "" when
/// neither applies.
std::string pipelinedZeroWarning(int64_t zeroStage, int64_t microBatches,
                                 int64_t zeroRanks,
                                 const std::vector<std::string> &zeroAxes,
                                 const std::vector<RankReport> &reports);

} // namespace trellis

#endif // TRELLIS_COMPILER_COMPILEREPORT_H
