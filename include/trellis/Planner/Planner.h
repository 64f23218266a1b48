//===- Planner.h - The fastest plan that fits -------------------*- C++ -*-===//
//
// `trellis plan`: for a model, a cluster, a device count and a global
// batch, enumerates plans (PlanChoice.h: meshes by role, HSDP's among them,
// micro-batch size, schedule and chunks, ZeRO stage, sequence parallelism,
// recomputation), prices each on
// the unpartitioned step (the cost query, trellis/Sharding/ShardingCost.h),
// predicts its step time (StepTime.h) and memory, and ranks those that fit.
// The plans it shows get their memory from the compiler's own report
// (`trellis compile --report`), byte for byte.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PLANNER_PLANNER_H
#define TRELLIS_PLANNER_PLANNER_H

#include "trellis/Compiler/Compile.h"
#include "trellis/Planner/Cluster.h"
#include "trellis/Planner/PlanChoice.h"
#include "trellis/Planner/StepTime.h"

#include <optional>
#include <string>
#include <vector>

namespace trellis::planner {

struct PlanRequest {
  /// The model: a config's or MLIR's text, as `trellis compile` reads it.
  std::string modelText;
  ModelFormat format = ModelFormat::Config;
  std::string modelSource;
  ClusterSpec cluster;
  int64_t gpus = 1;
  int64_t globalBatch = 0;
  int64_t seq = 0;
  std::string precision = "bf16";
  /// Plans to show (each gets the compiler's exact memory report).
  int64_t top = 5;
  /// Worker threads (each compiles in its own MLIR context); 0: the
  /// machine's cores.
  int64_t threads = 0;
};

/// Per pipeline stage, in bytes.
struct StageMemory {
  int64_t parameters = 0, gradients = 0, optimizer = 0, activations = 0;
  int64_t peak = 0;
};

struct PlanEvaluation {
  PlanChoice choice;
  StepTime time;
  double tokensPerSecondPerGpu = 0;
  /// Model FLOPs per step (docs/Planner.md: 6 N T plus attention, no
  /// recomputation) per second per GPU, and their share of the peak.
  double modelFlopsPerGpu = 0;
  double mfu = 0;
  /// Per stage. `exactMemory`: from the compiler's report (the memory plan
  /// the runtime allocates); otherwise the screening estimate.
  std::vector<StageMemory> memory;
  bool exactMemory = false;
  bool fits = false;
  /// When it does not fit: the stage and the largest term of its memory.
  std::string bindingTerm;

  int64_t peakBytes() const;
  llvm::json::Object toJson(int64_t globalBatch, int64_t seq,
                            const std::string &precision) const;
};

/// One priced candidate, for the picture of the search.
struct CandidatePoint {
  std::string plan;
  double seconds = 0;
  double tokensPerSecondPerGpu = 0;
  /// The largest stage's peak: the compiler's memory plan for the plans
  /// shown, else the screening estimate.
  int64_t peakBytes = 0;
  bool fits = false;
  bool exactMemory = false;
};

struct SearchResult {
  /// Best first: the shown plans that fit, by predicted step time.
  std::vector<PlanEvaluation> plans;
  /// Every candidate priced (the best of its ZeRO and recomputation
  /// escalations), in no order.
  std::vector<CandidatePoint> candidates;
  /// Plans priced (each a cost query), and plans that failed to compile.
  int64_t candidatesEvaluated = 0;
  int64_t candidatesRejected = 0;
  /// Plans not priced: even their compute alone (CostComposer::lowerBound)
  /// is slower than twice `top` plans that fit.
  int64_t candidatesPruned = 0;
  double searchSeconds = 0;
  /// Compiles of the model cut short that candidates' costs were composed
  /// from (CostComposition.h); when none could be, why each candidate
  /// compiled the whole model.
  int64_t shortModelCompiles = 0;
  std::string wholeModelReason;
  /// When no plan fits: the one that came closest.
  std::optional<PlanEvaluation> closest;
};

/// Searches the plans `constraints` allows. Fails (nullopt, `error`) when
/// the request is impossible: a global batch no layout divides, more GPUs
/// than the model can use, no candidate that compiles. A search where none
/// fits returns no plans and `closest`.
std::optional<SearchResult> searchPlans(const PlanRequest &request,
                                        const PlanConstraints &constraints,
                                        std::string &error);

/// Sets the parallelism of `options` (the mesh, micro-batches and the
/// settings that apply) to `choice`'s for `request`'s global batch
/// (PlanChoice::applyTo); the rest of `options` stays as it is.
void applyPlanChoice(CompileOptions &options, const PlanRequest &request,
                     const PlanChoice &choice);

/// The time model's view of `choice` for `request` on the mesh `axes`
/// (major to minor, as a compile reports them): its schedule (1F1B
/// without a pipeline) and pipeline shape.
StepLayout stepLayoutOf(const PlanRequest &request, const PlanChoice &choice,
                        const std::vector<MeshAxis> &axes);

/// Reads the model file `path` (a config, or MLIR when it ends in .mlir)
/// into `request`; false with `error` when it cannot be read.
bool readPlanModel(const std::string &path, PlanRequest &request,
                   std::string &error);

/// A search's JSON (`trellis plan --json`, `trellis.plan`): the request,
/// the search's counts, the plans best first, and the closest plan (with
/// its binding term) when none fits.
llvm::json::Object searchResultJson(const PlanRequest &request,
                                    const SearchResult &result);

/// `1.50 GiB`, or `12.25 MiB` under a GiB.
std::string formatBytes(double bytes);

/// Model FLOPs of one step (docs/Planner.md).
double modelFlopsPerStep(const PlanRequest &request, int64_t parameters);

} // namespace trellis::planner

#endif // TRELLIS_PLANNER_PLANNER_H
