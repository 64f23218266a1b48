//===- CompileReport.cpp - Per-rank reports of a compiled step ------------===//

#include "trellis/Compiler/CompileReport.h"

#include "trellis/Common/ActionNames.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace trellis {

std::vector<RankReport> reportStep(mlir::func::FuncOp step) {
  return {{-1, computeStepReport(step)}};
}

std::vector<RankReport> reportStages(llvm::ArrayRef<mlir::func::FuncOp> stages,
                                     int64_t microBatches,
                                     bool withMemoryPlan) {
  // Each stage's ranks run its schedule: every micro-batch's actions, then
  // the step.
  llvm::SmallVector<llvm::SmallVector<RankItem>> stageItems;
  for (mlir::func::FuncOp stage : stages) {
    llvm::StringMap<llvm::SmallVector<mlir::Operation *>> programs;
    for (mlir::Operation &op : stage.getBody().front())
      if (auto name = op.getAttrOfType<mlir::StringAttr>(
              TrellisDialect::kProgramAttrName))
        programs[name.getValue()].push_back(&op);
    llvm::SmallVector<RankItem> &items = stageItems.emplace_back();
    for (mlir::Attribute entry : stage->getAttrOfType<mlir::ArrayAttr>(
             TrellisDialect::kScheduleAttrName)) {
      std::optional<ScheduledActionName> action = parseActionName(
          llvm::cast<mlir::StringAttr>(entry).getValue().str());
      if (!action)
        continue; // trellis-verify-pipeline checked every entry.
      int64_t microBatch = action->microBatch;
      for (mlir::Operation *op : programs[programName(action->program)]) {
        auto axisOf = [](mlir::ArrayAttr axes) {
          return llvm::cast<mlir::StringAttr>(axes[0]).getValue().str();
        };
        if (auto send = llvm::dyn_cast<SendOp>(op))
          items.push_back({nullptr, send.getInput(), true,
                           axisOf(send.getAxes()), microBatch,
                           static_cast<int64_t>(send.getChannel()),
                           static_cast<int64_t>(send.getPeer())});
        else if (auto recv = llvm::dyn_cast<RecvOp>(op))
          items.push_back({nullptr, recv.getResult(), false,
                           axisOf(recv.getAxes()), microBatch,
                           static_cast<int64_t>(recv.getChannel()),
                           static_cast<int64_t>(recv.getPeer())});
        else
          items.push_back({op, mlir::Value(), false, "", microBatch});
      }
    }
    // The results leave at the end of the step.
    items.push_back({stage.getBody().front().getTerminator(), mlir::Value(),
                     false, "", -1});
  }
  // Transfers name stages by their index along the pipeline.
  llvm::SmallVector<llvm::SmallVector<RankItem>> byIndex(stages.size());
  llvm::SmallVector<int64_t> indices;
  for (auto [stage, items] : llvm::zip(stages, stageItems)) {
    int64_t index = stage->getAttrOfType<mlir::IntegerAttr>(
                             TrellisDialect::kPipelineStageAttrName)
                        .getInt();
    indices.push_back(index);
    if (index >= 0 && index < static_cast<int64_t>(byIndex.size()))
      byIndex[index] = std::move(items);
  }
  if (stages.size() > 1)
    planItemSendCompletions(byIndex, microBatches);
  std::vector<RankReport> reports;
  for (auto [position, index] : llvm::enumerate(indices)) {
    mlir::func::FuncOp stage = stages[position];
    llvm::SmallVector<int64_t> arguments;
    for (unsigned i = 0; i < stage.getNumArguments(); ++i)
      if (stage.getArgAttr(i, TrellisDialect::kHeldAttrName))
        arguments.push_back(i);
    reports.push_back(
        {index, computeRankReport(stage, arguments, byIndex[index],
                                  microBatches, withMemoryPlan)});
  }
  return reports;
}

void printReports(const std::vector<RankReport> &reports,
                  llvm::raw_ostream &os) {
  for (const RankReport &entry : reports) {
    if (reports.size() > 1)
      os << "pipeline stage " << entry.stage << ":\n";
    entry.report.print(os);
  }
}

namespace {

/// The mesh's axes of more than one rank, with their roles.
llvm::json::Array meshJson(const std::vector<MeshAxis> &mesh) {
  llvm::json::Array axes;
  for (const MeshAxis &axis : mesh)
    if (axis.size > 1)
      axes.push_back(llvm::json::Object{
          {"name", axis.name},
          {"size", axis.size},
          {"role", std::string(axisRoleName(axis.role))}});
  return axes;
}

} // namespace

llvm::json::Value estimateJson(int64_t modelParameters,
                               const std::vector<MeshAxis> &mesh,
                               const std::vector<ShardedStepCost> &costs) {
  llvm::json::Array perRank;
  for (auto [stage, cost] : llvm::enumerate(costs)) {
    llvm::json::Object rank = cost.toJson();
    rank["stage"] = static_cast<int64_t>(stage);
    perRank.push_back(std::move(rank));
  }
  return llvm::json::Object{{"model_parameters", modelParameters},
                            {"mesh", meshJson(mesh)},
                            {"priced", "before partitioning"},
                            {"per_rank", std::move(perRank)}};
}

llvm::json::Value reportJson(int64_t modelParameters,
                             const std::vector<MeshAxis> &mesh,
                             const std::vector<RankReport> &reports) {
  llvm::json::Array axes = meshJson(mesh);
  llvm::json::Array perRank;
  for (const RankReport &entry : reports) {
    llvm::json::Object rank = entry.report.toJson();
    rank["stage"] = std::max<int64_t>(entry.stage, 0);
    perRank.push_back(std::move(rank));
  }
  return llvm::json::Object{{"model_parameters", modelParameters},
                            {"mesh", std::move(axes)},
                            {"per_rank", std::move(perRank)}};
}

std::string pipelinedZeroWarning(int64_t zeroStage, int64_t microBatches,
                                 int64_t zeroRanks,
                                 const std::vector<std::string> &zeroAxes,
                                 const std::vector<RankReport> &reports) {
  int64_t dataParallel = zeroRanks;
  if (zeroStage < 2 || dataParallel <= 1)
    return "";
  double actual = 0, zeroOne = 0;
  double share = double(dataParallel - 1) / dataParallel;
  for (const RankReport &entry : reports) {
    const StepReport &report = entry.report;
    for (const auto &[key, traffic] : report.communication) {
      // Keys are "<collective> over <axis> <axis>...".
      auto [kind, axes] = llvm::StringRef(key).split(" over ");
      llvm::SmallVector<llvm::StringRef> names;
      axes.split(names, ' ', -1, /*KeepEmpty=*/false);
      if ((kind == "reduce_scatter" || kind == "all_gather") &&
          llvm::any_of(names, [&](llvm::StringRef name) {
            return llvm::is_contained(zeroAxes, name.str());
          }))
        actual += traffic.wireBytes;
    }
    // ZeRO-1 reduce-scatters the whole gradients and gathers the whole
    // parameters once per step.
    double gradients = double(report.gradientBytes) * dataParallel;
    double parameters = double(report.parameterBytes) *
                        (zeroStage == 3 ? dataParallel : 1);
    zeroOne += share * (gradients + parameters);
  }
  if (zeroOne <= 0)
    return "";
  return llvm::formatv(
      "--zero {0} with a pipeline of {1} "
      "micro-batches moves {2:F1} MiB per step over {6} on a rank of each "
      "stage ({3}), "
      "{4:F2}x ZeRO-1's {5:F1} MiB",
      zeroStage, microBatches, actual / (1 << 20),
      zeroStage == 3 ? "gradients reduce-scattered and parameters gathered "
                       "per micro-batch"
                     : "gradients reduce-scattered per micro-batch",
      actual / zeroOne, zeroOne / (1 << 20), llvm::join(zeroAxes, " x "))
      .str();
}

} // namespace trellis
