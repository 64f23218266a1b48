//===- PlanCommand.cpp - `trellis plan` -----------------------------------===//
//
// The auto-parallel planner's command line (trellis/Planner/Planner.h):
// the fastest plans that fit a model on a cluster, with their predicted
// step time, throughput and memory, and the `trellis compile` flags of the
// best; or (--evaluate) the prediction of one given plan, itemized.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "mlir/Support/FileUtilities.h"
#include "trellis/Compiler/CompileOptionTable.h"
#include "trellis/Planner/PlanPicture.h"
#include "trellis/Planner/Planner.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cstdio>

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand planCommand("plan",
                           "Find the fastest plan that fits a model on a "
                           "cluster, and predict its step time and memory");

namespace {
cl::OptionCategory planCategory("Planner");

cl::opt<std::string> planModel(cl::Positional,
                               cl::desc("<config.json | model.mlir>"),
                               cl::Required, cl::sub(planCommand));
cl::opt<std::string> planCluster(
    "cluster",
    cl::desc("A preset (a100-80g, h100-sxm, h200-sxm, b200) or a cluster "
             "file (docs/Planner.md)"),
    cl::value_desc("name|file"), cl::Required, cl::cat(planCategory),
    cl::sub(planCommand));
cl::opt<int64_t> planGpus("gpus", cl::desc("Devices the plan uses"),
                          cl::Required, cl::cat(planCategory),
                          cl::sub(planCommand));
cl::opt<int64_t> planBatch("global-batch",
                           cl::desc("Sequences per optimizer step"),
                           cl::Required, cl::cat(planCategory),
                           cl::sub(planCommand));
cl::opt<int64_t> planSeq("seq", cl::desc("Tokens per sequence"), cl::Required,
                         cl::cat(planCategory), cl::sub(planCommand));
cl::opt<std::string> planPrecision("precision",
                                   cl::desc("bf16 (default), fp16 or fp32"),
                                   cl::init("bf16"), cl::cat(planCategory),
                                   cl::sub(planCommand));
cl::opt<int64_t> planTop("top", cl::desc("Plans to show (default 5)"),
                         cl::init(5), cl::cat(planCategory),
                         cl::sub(planCommand));
cl::opt<std::string> planEvaluate(
    "evaluate",
    cl::desc("Predict this plan (what it leaves out, the planner chooses): "
             "pp=8,dp=16,tp=8,sp,zero=1,schedule=interleaved,chunks=4,"
             "micro-batch=1,recompute=full"),
    cl::value_desc("plan"), cl::cat(planCategory), cl::sub(planCommand));
cl::opt<std::string> planJson("json",
                              cl::desc("Write the plans as JSON "
                                       "(docs/Planner.md)"),
                              cl::value_desc("file"), cl::cat(planCategory),
                              cl::sub(planCommand));
cl::opt<std::string> planTimeline(
    "timeline",
    cl::desc("Write the best plan's simulated per-rank timeline as a "
             "Chrome trace"),
    cl::value_desc("file"), cl::cat(planCategory), cl::sub(planCommand));
cl::opt<std::string> planPicture(
    "picture",
    cl::desc("Draw the candidates' throughput against their memory (the "
             "feasible front and the chosen plan marked) and the chosen "
             "plan's simulated step as SVG"),
    cl::value_desc("file.svg"), cl::cat(planCategory), cl::sub(planCommand));
cl::opt<int64_t> planThreads("threads",
                             cl::desc("Worker threads (default: the cores)"),
                             cl::init(0), cl::cat(planCategory),
                             cl::sub(planCommand));

/// Seconds to four significant digits, trailing zeros kept (a tiny
/// model's step is 2.500e-05 s, a large one's 102.6 s, another 13.00 s).
std::string seconds(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%#.4g", value);
  return text;
}

void printBreakdown(const planner::PlanEvaluation &plan,
                    llvm::raw_ostream &os) {
  const planner::RankTime *slowest = nullptr;
  for (const planner::RankTime &rank : plan.time.ranks)
    if (!slowest || rank.stepEnd > slowest->stepEnd)
      slowest = &rank;
  os << llvm::formatv("  step {0} s on the slowest rank: compute {1} s "
                      "(optimizer {2} s), pipeline bubble {3} s\n",
                      seconds(plan.time.seconds), seconds(slowest->compute),
                      seconds(slowest->optimizer), seconds(slowest->bubble));
  for (const auto &[key, time] : slowest->exposed)
    if (time > 0)
      os << llvm::formatv("  exposed {0}: {1} s\n", key, seconds(time));
  for (auto [stage, memory] : llvm::enumerate(plan.memory))
    os << llvm::formatv("  stage {0}: parameters {1}, gradients {2}, "
                        "optimizer {3}, activations and the rest {4}; peak "
                        "{5} ({6})\n",
                        stage, planner::formatBytes(memory.parameters),
                        planner::formatBytes(memory.gradients),
                        planner::formatBytes(memory.optimizer),
                        planner::formatBytes(memory.activations),
                        planner::formatBytes(memory.peak),
                        plan.exactMemory ? "the compiler's memory plan"
                                         : "estimate");
}

int fail(const llvm::Twine &message) { return reportError("plan", message); }

} // namespace

int runPlanCommand() {
  planner::PlanRequest request;
  std::string error;
  std::optional<planner::ClusterSpec> cluster =
      planner::loadCluster(planCluster, error);
  if (!cluster)
    return fail("--cluster: " + error);
  request.cluster = std::move(*cluster);
  if (planGpus < 1)
    return fail(llvm::formatv("--gpus: expected a count >= 1, found {0}",
                              planGpus.getValue()));
  if (planBatch < 1)
    return fail(llvm::formatv("--global-batch: expected >= 1, found {0}",
                              planBatch.getValue()));
  if (planSeq < 2)
    return fail(
        llvm::formatv("--seq: expected >= 2, found {0}", planSeq.getValue()));
  OptionValue precision;
  precision.text = planPrecision;
  if (std::string problem = checkOptionValue(
          *findOption(compileOptionTable(), "precision"), precision);
      !problem.empty())
    return fail("--precision: " + problem);
  if (planTop < 1)
    return fail(
        llvm::formatv("--top: expected >= 1, found {0}", planTop.getValue()));
  if (planThreads < 0)
    return fail(llvm::formatv("--threads: expected >= 0, found {0}",
                              planThreads.getValue()));
  request.gpus = planGpus;
  request.globalBatch = planBatch;
  request.seq = planSeq;
  request.precision = planPrecision;
  request.top = planTop;
  request.threads = planThreads;
  planner::PlanConstraints constraints;
  if (!planEvaluate.empty()) {
    std::optional<planner::PlanConstraints> parsed =
        planner::parsePlanConstraints(planEvaluate, error);
    if (!parsed)
      return fail("--evaluate: " + error);
    constraints = *parsed;
    request.top = 1;
  }
  if (!planner::readPlanModel(planModel, request, error))
    return fail(error);

  std::optional<planner::SearchResult> result =
      planner::searchPlans(request, constraints, error);
  if (!result)
    return fail(error);
  llvm::outs() << llvm::formatv(
      "{0} on {1} x {2} ({3}), {4} sequences x {5} tokens per step, {6}\n"
      "priced {7} plans in {8:f1} s ({9} refused by the compiler, {10} "
      "pruned by a bound)\n",
      planModel, planGpus.getValue(), request.cluster.name,
      request.cluster.device.name, planBatch.getValue(), planSeq.getValue(),
      planPrecision, result->candidatesEvaluated, result->searchSeconds,
      result->candidatesRejected, result->candidatesPruned);
  // The JSON is written whether or not a plan fits (then it holds the
  // closest one).
  if (!planJson.empty()) {
    llvm::json::Object root = planner::searchResultJson(request, *result);
    if (writeOutputFile("plan", "--json", planJson, [&](llvm::raw_ostream &os) {
          os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)))
             << "\n";
        }) != 0)
      return 1;
  }
  if (result->plans.empty()) {
    const planner::PlanEvaluation &closest = *result->closest;
    llvm::errs() << llvm::formatv(
        "trellis plan: error: no plan fits {0} per device ({1:f0}% of {2}); "
        "the smallest found needs {6}{3}: {4}\n  binding term: {5}\n",
        planner::formatBytes(request.cluster.usableMemory()),
        request.cluster.device.usableMemoryFraction * 100,
        planner::formatBytes(request.cluster.device.memoryBytes),
        planner::formatBytes(closest.peakBytes()), closest.choice.text(),
        closest.bindingTerm,
        // The screening estimate is a lower bound (docs/Planner.md).
        closest.exactMemory ? "" : "at least ");
    return 1;
  }
  llvm::outs() << llvm::formatv("{0,-3}{1,-78}{2,10}{3,12}{4,9}{5,7}{6,12}\n",
                                "#", "plan", "step s", "tok/s/GPU", "TFLOP/s",
                                "MFU", "peak");
  for (auto [index, plan] : llvm::enumerate(result->plans))
    llvm::outs() << llvm::formatv(
        "{0,-3}{1,-78}{2,10}{3,12:f0}{4,9:f1}{5,7:f3}{6,12}\n", index + 1,
        plan.choice.text(), seconds(plan.time.seconds),
        plan.tokensPerSecondPerGpu, plan.modelFlopsPerGpu / 1e12, plan.mfu,
        planner::formatBytes(plan.peakBytes()));
  const planner::PlanEvaluation &best = result->plans.front();
  llvm::outs() << "\nbest: trellis compile " << planModel << " "
               << best.choice.flags(planBatch, planSeq, planPrecision) << "\n";
  printBreakdown(best, llvm::outs());
  if (!planPicture.empty() &&
      writeOutputFile("plan", "--picture", planPicture,
                      [&](llvm::raw_ostream &os) {
                        os << planner::planPictureSvg(request, *result);
                      }) != 0)
    return 1;
  if (!planTimeline.empty())
    return writeOutputFile("plan", "--timeline", planTimeline,
                           [&](llvm::raw_ostream &os) {
                             os << chromeTrace(best.time.simulation);
                           });
  return 0;
}

} // namespace trellis::driver
