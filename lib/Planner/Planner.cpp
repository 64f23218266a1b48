//===- Planner.cpp - The fastest plan that fits ---------------------------===//

#include "trellis/Planner/Planner.h"

#include "PlanCompile.h"
#include "trellis/Planner/CostComposition.h"

#include "trellis/Common/FileKind.h"
#include "trellis/Compiler/ModelSource.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

namespace trellis::planner {

namespace {

/// Facts of a config the search bounds its degrees by (0: unknown, as
/// for an MLIR model, whose limits the compiler finds).
struct ModelFacts {
  int64_t layers = 0, heads = 0, kvHeads = 0, hidden = 0, headDim = 0;
  /// A mixture of experts' experts per layer (0: dense).
  int64_t experts = 0;
};

ModelFacts readFacts(const PlanRequest &request) {
  ModelFacts facts;
  if (request.format != ModelFormat::Config)
    return facts;
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(request.modelText);
  if (!json) {
    llvm::consumeError(json.takeError());
    return facts;
  }
  const llvm::json::Object *config = json->getAsObject();
  if (!config)
    return facts;
  auto integer = [&](std::initializer_list<const char *> keys) -> int64_t {
    for (const char *key : keys)
      if (std::optional<int64_t> value = config->getInteger(key))
        return *value;
    return 0;
  };
  facts.layers = integer({"num_hidden_layers", "n_layer"});
  facts.heads = integer({"num_attention_heads", "n_head"});
  facts.kvHeads = integer({"num_key_value_heads"});
  if (!facts.kvHeads)
    facts.kvHeads = facts.heads;
  facts.hidden = integer({"hidden_size", "n_embd"});
  facts.headDim = integer({"head_dim"});
  facts.experts = integer({"num_local_experts", "num_experts"});
  if (!facts.headDim && facts.heads)
    facts.headDim = facts.hidden / facts.heads;
  return facts;
}

std::vector<int64_t> divisorsOf(int64_t n) {
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      divisors.push_back(d);
  return divisors;
}

/// The binding term of the largest stage.
std::string bindingTermOf(const std::vector<StageMemory> &memory) {
  size_t worst = 0;
  for (size_t i = 0; i < memory.size(); ++i)
    if (memory[i].peak > memory[worst].peak)
      worst = i;
  const StageMemory &stage = memory[worst];
  std::pair<int64_t, const char *> terms[] = {
      {stage.parameters, "parameters"},
      {stage.gradients, "gradients"},
      {stage.optimizer, "optimizer states"},
      {stage.activations, "activations"}};
  auto largest = std::max_element(
      std::begin(terms), std::end(terms),
      [](const auto &a, const auto &b) { return a.first < b.first; });
  return llvm::formatv("stage {0}: {1} ({2} of {3})", worst, largest->second,
                       formatBytes(largest->first), formatBytes(stage.peak))
      .str();
}

/// Prices `choice`: its cost query (composed by `composer` when it can,
/// else from a compile of the whole model), the step time, the screening
/// memory.
std::optional<PlanEvaluation> evaluate(const PlanRequest &request,
                                       const PlanChoice &choice,
                                       CostComposer *composer,
                                       std::string &error) {
  std::optional<ComposedCost> cost;
  if (composer) {
    std::string why;
    cost = composer->compose(choice, why);
  }
  if (!cost)
    cost = compileWholeCost(request, choice, error);
  if (!cost)
    return std::nullopt;
  StepLayout layout = stepLayoutOf(request, choice, cost->meshAxes);
  std::optional<StepTime> time =
      predictStepTime(cost->ranks, layout, request.cluster, error);
  if (!time)
    return std::nullopt;
  PlanEvaluation evaluation;
  evaluation.choice = choice;
  double tokens = static_cast<double>(request.globalBatch) * request.seq;
  evaluation.tokensPerSecondPerGpu =
      tokens / time->seconds / static_cast<double>(choice.gpus());
  evaluation.modelFlopsPerGpu =
      modelFlopsPerStep(request, cost->modelParameters) / time->seconds /
      choice.gpus();
  evaluation.mfu =
      evaluation.modelFlopsPerGpu /
      request.cluster.peakFlops(request.precision == "fp32"   ? "f32"
                                : request.precision == "fp16" ? "f16"
                                                              : "bf16");
  for (auto [rank, rankCost] : llvm::enumerate(cost->ranks)) {
    StageMemory stage;
    stage.parameters = rankCost.parameterBytes;
    stage.optimizer = rankCost.optimizerStateBytes;
    stage.gradients = rankCost.gradientBytes;
    int64_t saved = 0, weightInputs = 0;
    for (int64_t bytes : rankCost.savedActivationBytes)
      saved = std::max(saved, bytes);
    for (int64_t bytes : rankCost.weightGradientInputBytes)
      weightInputs = std::max(weightInputs, bytes);
    const PipelineSimulation &simulation = time->simulation;
    int64_t live = rank < simulation.peakLiveActivations.size()
                       ? simulation.peakLiveActivations[rank]
                       : 1;
    int64_t pending = rank < simulation.peakPendingWeightGradients.size()
                          ? simulation.peakPendingWeightGradients[rank]
                          : 0;
    // Split backwards (ZB-H1) keep what their weight gradients read until
    // they run: each bound holds at its own peak.
    stage.activations =
        std::max(saved * std::max<int64_t>(live, 1), weightInputs * pending);
    stage.peak = stage.parameters + stage.optimizer + stage.gradients +
                 stage.activations;
    evaluation.memory.push_back(stage);
  }
  evaluation.time = std::move(*time);
  evaluation.fits = evaluation.peakBytes() <= request.cluster.usableMemory();
  if (!evaluation.fits)
    evaluation.bindingTerm = bindingTermOf(evaluation.memory);
  return evaluation;
}

/// Replaces the screening memory of `evaluation` by the compiler's report.
bool measureMemory(const PlanRequest &request, PlanEvaluation &evaluation,
                   std::string &error) {
  CompileOptions options = compileOptionsOf(request, evaluation.choice);
  options.report = true;
  options.reportOnly = true;
  std::optional<CompiledModel> compiled =
      compilePlanModel(request, request.modelText, options, error);
  if (!compiled)
    return false;
  evaluation.memory.clear();
  for (const RankReport &rank : compiled->reports) {
    const StepReport &report = rank.report;
    StageMemory stage;
    stage.parameters = report.parameterBytes;
    stage.gradients = report.gradientBytes;
    stage.optimizer = report.optimizerStateBytes;
    stage.peak = report.totalPeakBytes;
    stage.activations =
        std::max<int64_t>(0, stage.peak - report.modelStateBytes());
    evaluation.memory.push_back(stage);
  }
  evaluation.exactMemory = true;
  evaluation.fits = evaluation.peakBytes() <= request.cluster.usableMemory();
  evaluation.bindingTerm =
      evaluation.fits ? "" : bindingTermOf(evaluation.memory);
  return true;
}

/// The value of the fixed setting `name`, if any.
std::optional<std::string> fixedWord(const PlanConstraints &fixed,
                                     const char *name) {
  if (const OptionValue *value = fixed.setting(name))
    return value->text;
  return std::nullopt;
}
std::optional<int64_t> fixedInteger(const PlanConstraints &fixed,
                                    const char *name) {
  if (const OptionValue *value = fixed.setting(name))
    return value->integer;
  return std::nullopt;
}
std::optional<bool> fixedFlag(const PlanConstraints &fixed, const char *name) {
  if (const OptionValue *value = fixed.setting(name))
    return value->flag;
  return std::nullopt;
}

/// The schedules (and chunks) of `pp` stages over `microBatches` that
/// `fixed` allows: 1F1B alone without a pipeline.
std::vector<std::pair<std::string, int64_t>>
pipelineSchedules(int64_t pp, int64_t microBatches,
                  const PlanConstraints &fixed, const ModelFacts &facts) {
  std::vector<std::pair<std::string, int64_t>> schedules;
  if (pp == 1)
    return {{"1f1b", 1}};
  std::optional<std::string> schedule = fixedWord(fixed, "schedule");
  std::optional<int64_t> fixedChunks = fixedInteger(fixed, "chunks");
  for (const char *name : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    if (schedule && *schedule != name)
      continue;
    // Chunks fixed above one are the interleaved schedule's.
    if (fixedChunks && *fixedChunks > 1 && std::string(name) != "interleaved")
      continue;
    // GPipe is searched only when asked for: 1F1B has its bubble and
    // keeps fewer micro-batches alive, so it dominates.
    if (!schedule && std::string(name) == "gpipe")
      continue;
    if (std::string(name) != "interleaved") {
      schedules.push_back({name, 1});
      continue;
    }
    // The chunk counts whose virtual stages split the layers evenly; where
    // none does (Llama-3.1-405B's 126 layers over 16 or 8 stages), every
    // count that leaves each virtual stage a layer, split unevenly by the
    // compiler's balancer.
    auto chunkCounts = [&](bool even) {
      std::vector<int64_t> counts;
      for (int64_t chunks = 2; chunks <= 8; ++chunks)
        if ((!fixedChunks || *fixedChunks == chunks) &&
            microBatches % pp == 0 &&
            (!facts.layers || (even ? facts.layers % (pp * chunks) == 0
                                    : facts.layers >= pp * chunks)))
          counts.push_back(chunks);
      return counts;
    };
    std::vector<int64_t> counts = chunkCounts(/*even=*/true);
    if (counts.empty())
      counts = chunkCounts(/*even=*/false);
    for (int64_t chunks : counts)
      schedules.push_back({name, chunks});
  }
  return schedules;
}

/// The axis of `role` the constraints name, else one called `name`, of
/// `size` ranks.
MeshAxis axisOf(const PlanConstraints &fixed, AxisRole role, const char *name,
                int64_t size) {
  for (const MeshAxis &axis : fixed.axes)
    if (axis.role == role)
      return {axis.name, size, role};
  return {name, size, role};
}

/// The mesh of the degrees (meshOfDegrees), with the names the constraints
/// give: their data axes when they give several, an expert or context
/// axis they name even of one rank.
std::vector<MeshAxis> meshOf(const PlanConstraints &fixed, int64_t pp,
                             int64_t dp, int64_t ep, int64_t cp, int64_t tp) {
  std::vector<MeshAxis> mesh{axisOf(fixed, AxisRole::Pipeline, "pp", pp)};
  std::vector<MeshAxis> data;
  for (const MeshAxis &axis : fixed.axes)
    if (axis.role == AxisRole::Data)
      data.push_back(axis);
  if (data.size() > 1)
    mesh.insert(mesh.end(), data.begin(), data.end());
  else
    mesh.push_back(axisOf(fixed, AxisRole::Data, "dp", dp));
  // An axis of one rank stays out unless the constraints name it otherwise.
  auto renamed = [&](AxisRole role, const char *name) {
    return llvm::any_of(fixed.axes, [&](const MeshAxis &axis) {
      return axis.role == role && axis.name != name;
    });
  };
  if (ep > 1 || renamed(AxisRole::Expert, "ep"))
    mesh.push_back(axisOf(fixed, AxisRole::Expert, "ep", ep));
  if (cp > 1 || renamed(AxisRole::Context, "cp"))
    mesh.push_back(axisOf(fixed, AxisRole::Context, "cp", cp));
  mesh.push_back(axisOf(fixed, AxisRole::Tensor, "tp", tp));
  return mesh;
}

/// The structural candidates `constraints` allows: degrees, micro-batch
/// size, schedule and chunks. ZeRO and recomputation are escalated per
/// candidate until it fits.
std::vector<PlanChoice> structuralCandidates(const PlanRequest &request,
                                             const PlanConstraints &fixed,
                                             const ModelFacts &facts) {
  std::vector<PlanChoice> candidates;
  int64_t gpus = request.gpus;
  auto allowed = [&](AxisRole role, int64_t value) {
    std::optional<int64_t> degree = fixed.degree(role);
    return !degree || *degree == value;
  };
  std::optional<int64_t> fixedTp = fixed.degree(AxisRole::Tensor),
                         fixedCp = fixed.degree(AxisRole::Context);
  std::optional<int64_t> microBatchSize = fixed.microBatchSize;
  std::optional<std::string> contextKind = fixedWord(fixed, "cp-kind");
  for (int64_t tp : divisorsOf(gpus)) {
    if (!allowed(AxisRole::Tensor, tp) ||
        (!fixedTp && tp > request.cluster.devicesPerNode))
      continue;
    if (facts.heads && (facts.heads % tp || facts.kvHeads % tp))
      continue;
    for (int64_t pp : divisorsOf(gpus / tp)) {
      if (!allowed(AxisRole::Pipeline, pp) ||
          (facts.layers && pp > facts.layers))
        continue;
      for (int64_t cp : divisorsOf(gpus / tp / pp)) {
        if (!allowed(AxisRole::Context, cp) || (!fixedCp && cp > 8) ||
            (cp > 1 && request.seq % (2 * cp) != 0))
          continue;
        // Ulysses splits each rank's heads (and kv heads) over cp; where
        // they do not divide, ring attention passes keys and values around.
        bool ulyssesSplits = !facts.heads || ((facts.heads / tp) % cp == 0 &&
                                              (facts.kvHeads / tp) % cp == 0);
        std::string kind =
            contextKind.value_or(ulyssesSplits ? "ulysses" : "ring");
        if (cp > 1 && kind == "ulysses" && !ulyssesSplits)
          continue;
        int64_t dp = gpus / tp / pp / cp;
        if (request.globalBatch % dp)
          continue;
        // Of the batch's ranks, those that also split the experts.
        std::vector<int64_t> expertSplits;
        for (int64_t ep : divisorsOf(dp))
          if (allowed(AxisRole::Expert, ep) &&
              allowed(AxisRole::Data, dp / ep) &&
              (ep == 1 || (facts.experts && facts.experts % ep == 0)))
            expertSplits.push_back(ep);
        // The search tries powers of two; a size the caller fixes (LLM
        // Foundry's 3 or 6) is taken as given.
        std::vector<int64_t> microSizes = {1, 2, 4, 8, 16};
        if (microBatchSize)
          microSizes = {*microBatchSize};
        for (int64_t micro : microSizes) {
          if ((request.globalBatch / dp) % micro)
            continue;
          int64_t microBatches = request.globalBatch / dp / micro;
          if (pp > 1 && microBatches < pp && !microBatchSize)
            continue;
          for (const auto &[schedule, chunks] :
               pipelineSchedules(pp, microBatches, fixed, facts))
            for (int64_t ep : expertSplits) {
              PlanChoice choice;
              choice.mesh = meshOf(fixed, pp, dp / ep, ep, cp, tp);
              choice.microBatchSize = micro;
              CompileOptions &settings = choice.settings;
              settings.schedule = schedule;
              settings.chunks = chunks;
              settings.sequenceParallel =
                  tp > 1 && fixedFlag(fixed, "sp").value_or(true);
              settings.contextKind = kind;
              settings.zero = choice.batchRanks() > 1
                                  ? fixedInteger(fixed, "zero").value_or(0)
                                  : 0;
              settings.zeroAxes = fixedWord(fixed, "zero-axes");
              settings.recompute =
                  fixedWord(fixed, "recompute").value_or("none");
              settings.fuseGradientAccumulation =
                  fixedFlag(fixed, "fuse-gradient-accumulation").value_or(true);
              settings.scheduleCollectives =
                  fixedFlag(fixed, "schedule-collectives").value_or(true);
              candidates.push_back(choice);
            }
        }
      }
    }
  }
  return candidates;
}

/// `choice` as HSDP where its data axis spans nodes: ZeRO-3 shards over
/// dp_shard, the most data ranks whose group (with the axes minor to it)
/// fits in a node, and the model states are replicated over dp_replicate,
/// the rest (torchtitan's HSDP: FSDP within, replicas across). Nullopt for
/// another ZeRO stage, where the data axis fits in a node, or where it is
/// not the one dp axis the search builds.
std::optional<PlanChoice> hybridSharded(const PlanChoice &choice,
                                        int64_t devicesPerNode) {
  auto data = llvm::find_if(choice.mesh, [](const MeshAxis &axis) {
    return axis.role == AxisRole::Data;
  });
  if (!choice.describedByDegrees() || choice.degree(AxisRole::Expert) > 1 ||
      choice.settings.zero != 3 || choice.settings.zeroAxes)
    return std::nullopt;
  int64_t dp = data->size;
  int64_t minor =
      choice.degree(AxisRole::Context) * choice.degree(AxisRole::Tensor);
  if (dp * minor <= devicesPerNode)
    return std::nullopt;
  int64_t shard = 1;
  for (int64_t size : divisorsOf(dp))
    if (size < dp && size * minor <= devicesPerNode)
      shard = size;
  if (shard == 1)
    return std::nullopt;
  PlanChoice hybrid = choice;
  auto at = hybrid.mesh.begin() + (data - choice.mesh.begin());
  at = hybrid.mesh.erase(at);
  hybrid.mesh.insert(at, {{"dp_replicate", dp / shard, AxisRole::Data},
                          {"dp_shard", shard, AxisRole::Data}});
  hybrid.settings.zeroAxes = "dp_shard";
  return hybrid;
}

/// A lower bound of the step of `plain`'s plan as HSDP (hybridSharded):
/// on each rank, its step less all the communication it exposes. HSDP
/// changes the communication alone (its compute and its pipeline are the
/// same, its optimizer's share larger), and dp's traffic shares what
/// compute hides with the other axes', so all of it may shrink.
double hybridBound(const PlanEvaluation &plain) {
  double bound = 0;
  for (const RankTime &rank : plain.time.ranks) {
    double exposed = 0;
    for (const auto &[key, seconds] : rank.exposed)
      exposed += seconds;
    bound = std::max(bound, rank.stepEnd - exposed);
  }
  return bound;
}

/// The ZeRO stages and recomputations to price for a structural
/// candidate, by recomputation, least first: every ZeRO stage the
/// constraints allow at each, pipelined or not (ZeRO shards the
/// optimizer's work and memory, and changes the step's collectives, so
/// any stage may be the fastest; the compiler builds ZeRO-2 and 3 with
/// pipelines too), ZeRO-3 also as HSDP where the data axis spans nodes;
/// full recomputation is tried only when nothing fits without it.
std::vector<std::vector<PlanChoice>>
zeroAndRecompute(const PlanChoice &choice, const PlanConstraints &fixed,
                 int64_t devicesPerNode) {
  std::vector<int64_t> stages{choice.settings.zero};
  if (!fixed.setting("zero") && choice.batchRanks() > 1)
    stages = {0, 1, 2, 3};
  std::vector<std::string> recomputes{choice.settings.recompute};
  if (!fixed.setting("recompute") && choice.settings.recompute != "full")
    recomputes.push_back("full");
  std::vector<std::vector<PlanChoice>> levels;
  for (const std::string &recompute : recomputes) {
    levels.emplace_back();
    for (int64_t zero : stages) {
      PlanChoice next = choice;
      next.settings.zero = zero;
      next.settings.recompute = recompute;
      levels.back().push_back(next);
      // HSDP only where the constraints leave the data axes open.
      if (std::optional<PlanChoice> hybrid =
              hybridSharded(next, devicesPerNode);
          hybrid && !fixed.degree(AxisRole::Data) &&
          !fixed.setting("zero-axes"))
        levels.back().push_back(std::move(*hybrid));
    }
  }
  return levels;
}

} // namespace

StepLayout stepLayoutOf(const PlanRequest &request, const PlanChoice &choice,
                        const std::vector<MeshAxis> &axes) {
  StepLayout layout;
  for (MeshAxis axis : axes) {
    if (axis.role == AxisRole::Unassigned)
      axis.role = impliedAxisRole(axis.name);
    layout.axes.push_back(axis);
  }
  int64_t pp = choice.degree(AxisRole::Pipeline);
  layout.schedule = parseScheduleKind(pp > 1 ? choice.schedule() : "1f1b")
                        .value_or(ScheduleKind::OneFOneB);
  layout.pipeline.ranks = pp;
  layout.pipeline.microBatches = choice.microBatches(request.globalBatch);
  layout.pipeline.chunks = choice.chunksPerRank();
  return layout;
}

void applyPlanChoice(CompileOptions &options, const PlanRequest &request,
                     const PlanChoice &choice) {
  options = choice.applyTo(std::move(options), request.globalBatch);
}

std::string formatBytes(double bytes) {
  constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
  if (bytes >= kGiB)
    return llvm::formatv("{0:f2} GiB", bytes / kGiB).str();
  return llvm::formatv("{0:f2} MiB", bytes / kMiB).str();
}

double modelFlopsPerStep(const PlanRequest &request, int64_t parameters) {
  ModelFacts facts = readFacts(request);
  double tokens = static_cast<double>(request.globalBatch) * request.seq;
  double attention = 12.0 * facts.layers * facts.heads * facts.headDim *
                     static_cast<double>(request.seq);
  return (6.0 * parameters + attention) * tokens;
}

int64_t PlanEvaluation::peakBytes() const {
  int64_t peak = 0;
  for (const StageMemory &stage : memory)
    peak = std::max(peak, stage.peak);
  return peak;
}

llvm::json::Object PlanEvaluation::toJson(int64_t globalBatch, int64_t seq,
                                          const std::string &precision) const {
  llvm::json::Array peaks, stages;
  for (const StageMemory &stage : memory) {
    peaks.push_back(stage.peak);
    stages.push_back(llvm::json::Object{{"parameters", stage.parameters},
                                        {"gradients", stage.gradients},
                                        {"optimizer", stage.optimizer},
                                        {"activations", stage.activations},
                                        {"peak", stage.peak}});
  }
  llvm::json::Object breakdown = time.toJson();
  breakdown["memory"] = std::move(stages);
  return llvm::json::Object{
      {"mesh", llvm::json::Object{{"pp", choice.degree(AxisRole::Pipeline)},
                                  {"dp", choice.degree(AxisRole::Data)},
                                  {"ep", choice.degree(AxisRole::Expert)},
                                  {"cp", choice.degree(AxisRole::Context)},
                                  {"tp", choice.degree(AxisRole::Tensor)}}},
      {"plan", choice.text()},
      {"flags", choice.flags(globalBatch, seq, precision)},
      {"compile_options", choice.compileKeywords(globalBatch, seq, precision)},
      {"step_time_s", time.seconds},
      {"tokens_per_s_per_gpu", tokensPerSecondPerGpu},
      {"model_tflops_per_gpu", modelFlopsPerGpu / 1e12},
      {"mfu", mfu},
      {"peak_bytes", std::move(peaks)},
      {"memory_from", exactMemory ? "report" : "estimate"},
      {"fits", fits},
      {"breakdown", std::move(breakdown)},
  };
}

llvm::json::Object searchResultJson(const PlanRequest &request,
                                    const SearchResult &result) {
  llvm::json::Array plans;
  for (const PlanEvaluation &plan : result.plans)
    plans.push_back(
        plan.toJson(request.globalBatch, request.seq, request.precision));
  llvm::json::Object root{
      {"model", request.modelSource},
      {"cluster", request.cluster.toJson()},
      {"gpus", request.gpus},
      {"global_batch", request.globalBatch},
      {"seq", request.seq},
      {"precision", request.precision},
      {"candidates_evaluated", result.candidatesEvaluated},
      {"candidates_rejected", result.candidatesRejected},
      {"search_seconds", result.searchSeconds},
      {"candidates_pruned", result.candidatesPruned},
      {"short_model_compiles", result.shortModelCompiles},
      {"plans", std::move(plans)},
  };
  if (!result.wholeModelReason.empty())
    root["whole_model_reason"] = result.wholeModelReason;
  if (result.plans.empty() && result.closest) {
    llvm::json::Object closest = result.closest->toJson(
        request.globalBatch, request.seq, request.precision);
    closest["binding_term"] = result.closest->bindingTerm;
    root["closest"] = std::move(closest);
  }
  return root;
}

bool readPlanModel(const std::string &path, PlanRequest &request,
                   std::string &error) {
  bool mlir = llvm::StringRef(path).ends_with(".mlir");
  if (std::string why =
          readRegularFile(path, request.modelText,
                          mlir ? kMaxMlirFileBytes : kMaxConfigFileBytes);
      !why.empty()) {
    error = "cannot read '" + path + "': it " + why +
            ", expected a config.json or .mlir file";
    return false;
  }
  request.modelSource = path;
  request.format = mlir ? ModelFormat::Mlir : ModelFormat::Config;
  return true;
}

std::optional<SearchResult> searchPlans(const PlanRequest &request,
                                        const PlanConstraints &constraints,
                                        std::string &error) {
  auto start = std::chrono::steady_clock::now();
  // Counts within bounds that keep every product the search forms of them
  // (GPUs x sequences x tokens) in range, whichever caller set them.
  if (request.globalBatch < 1 || request.globalBatch > (int64_t(1) << 31)) {
    error = "the global batch: expected [1, 2^31] sequences, found " +
            std::to_string(request.globalBatch);
    return std::nullopt;
  }
  if (request.seq < 2 || request.seq > (int64_t(1) << 24)) {
    error = "the sequence length: expected [2, 2^24] tokens, found " +
            std::to_string(request.seq);
    return std::nullopt;
  }
  // Degrees the constraints fix must make (with the data axes) or divide
  // the GPUs. The message names the axes as given: `dp x tp x pp x cp`,
  // `dp_replicate x dp_shard x tp x pp x cp`.
  std::optional<int64_t> fixedEp = constraints.degree(AxisRole::Expert);
  int64_t fixed = 1;
  for (const MeshAxis &axis : constraints.axes)
    fixed *= axis.size;
  auto product = [&](bool withData) {
    std::vector<std::pair<AxisRole, const char *>> roles = {
        {AxisRole::Tensor, "tp"},
        {AxisRole::Pipeline, "pp"},
        {AxisRole::Context, "cp"}};
    if (withData)
      roles.insert(roles.begin(), {AxisRole::Data, "dp"});
    if (fixedEp)
      roles.push_back({AxisRole::Expert, "ep"});
    std::string text;
    for (const auto &[role, name] : roles) {
      std::string names;
      for (const MeshAxis &axis : constraints.axes)
        if (axis.role == role)
          names += (names.empty() ? "" : " x ") + axis.name;
      text += (text.empty() ? "" : " x ") + (names.empty() ? name : names);
    }
    return text;
  };
  if (constraints.degree(AxisRole::Data) && fixed != request.gpus) {
    error = llvm::formatv("the fixed {0} = {1}, but the plan is for {2} GPUs",
                          product(true), fixed, request.gpus)
                .str();
    return std::nullopt;
  }
  if (request.gpus % fixed) {
    error = llvm::formatv("the fixed {0} = {1} does not divide the {2} GPUs",
                          product(false), fixed, request.gpus)
                .str();
    return std::nullopt;
  }
  ModelFacts facts = readFacts(request);
  if (fixedEp.value_or(1) > 1 && !facts.experts) {
    error = llvm::formatv("ep={0} splits a mixture of experts' experts: "
                          "expected a config with num_local_experts or "
                          "num_experts, found a model without experts",
                          *fixedEp)
                .str();
    return std::nullopt;
  }
  if (facts.layers && facts.heads) {
    int64_t usable = facts.layers * facts.heads * 8 * request.globalBatch;
    if (request.gpus > usable) {
      error = llvm::formatv(
                  "{0} GPUs are more than this model and batch can use: at "
                  "most {1} layers x {2} heads x 8-way context x {3} "
                  "sequences = {4}",
                  request.gpus, facts.layers, facts.heads, request.globalBatch,
                  usable)
                  .str();
      return std::nullopt;
    }
  }
  std::vector<PlanChoice> candidates =
      structuralCandidates(request, constraints, facts);
  if (candidates.empty()) {
    error =
        llvm::formatv("no layout of {0} GPUs divides the global batch of {1} "
                      "sequences of {2} tokens within the constraints (dp must "
                      "divide the batch, tp the heads, 2 cp the sequence{3}; "
                      "each pipeline stage, or with chunks each virtual "
                      "stage, needs a layer)",
                      request.gpus, request.globalBatch, request.seq,
                      constraints.microBatchSize
                          ? llvm::formatv(", the micro-batch size {0} the "
                                          "batch of each data-parallel rank",
                                          *constraints.microBatchSize)
                                .str()
                          : std::string())
            .str();
    return std::nullopt;
  }
  SearchResult result;
  std::unique_ptr<CostComposer> composer =
      CostComposer::create(request, result.wholeModelReason);
  std::mutex mutex;
  std::vector<PlanEvaluation> priced;
  // The refusal of the first candidate in enumeration order, whichever
  // thread meets it.
  std::string firstError;
  size_t firstErrorCandidate = candidates.size();
  std::atomic<size_t> next{0};
  std::atomic<int64_t> evaluated{0}, rejected{0};
  // The fastest fitting times so far: a plan whose lower bound exceeds
  // the slowest of them cannot be among the plans shown (twice as many are
  // kept as shown, for those the compiler's memory plan turns away).
  std::vector<double> fastest;
  size_t kept = static_cast<size_t>(std::max<int64_t>(1, 2 * request.top));
  std::atomic<int64_t> pruned{0};
  auto slowestKept = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    return fastest.size() < kept ? std::numeric_limits<double>::infinity()
                                 : fastest.back();
  };
  auto keepFitting = [&](double seconds) {
    std::lock_guard<std::mutex> lock(mutex);
    fastest.insert(std::upper_bound(fastest.begin(), fastest.end(), seconds),
                   seconds);
    if (fastest.size() > kept)
      fastest.pop_back();
  };
  auto worker = [&] {
    for (size_t i = next++; i < candidates.size(); i = next++) {
      std::optional<PlanEvaluation> best;
      for (const std::vector<PlanChoice> &level : zeroAndRecompute(
               candidates[i], constraints, request.cluster.devicesPerNode)) {
        int64_t levelPruned = 0;
        // The last plan of the mesh of degrees priced in this level: the
        // HSDP plan after it is bounded by it.
        std::optional<PlanEvaluation> sibling;
        for (const PlanChoice &choice : level) {
          std::optional<double> bound;
          if (composer)
            bound = composer->lowerBound(choice, request.cluster);
          if (!choice.describedByDegrees() && sibling)
            bound = std::max(bound.value_or(0), hybridBound(*sibling));
          if (bound && *bound > slowestKept()) {
            ++pruned;
            ++levelPruned;
            sibling.reset();
            continue;
          }
          std::string why;
          std::optional<PlanEvaluation> evaluation =
              evaluate(request, choice, composer.get(), why);
          if (choice.describedByDegrees())
            sibling = evaluation;
          ++evaluated;
          if (evaluation && evaluation->fits)
            keepFitting(evaluation->time.seconds);
          if (!evaluation) {
            ++rejected;
            std::lock_guard<std::mutex> lock(mutex);
            if (i < firstErrorCandidate) {
              firstErrorCandidate = i;
              firstError = choice.text() + ": " + why;
            }
            continue;
          }
          if (!best || (evaluation->fits && !best->fits) ||
              (evaluation->fits == best->fits &&
               (evaluation->fits
                    ? evaluation->time.seconds < best->time.seconds
                    : evaluation->peakBytes() < best->peakBytes())))
            best = std::move(evaluation);
        }
        // More recomputation only when nothing fits without it, and not
        // when this level was too slow already (recomputing adds work).
        if ((best && best->fits) ||
            levelPruned == static_cast<int64_t>(level.size()))
          break;
      }
      if (best) {
        std::lock_guard<std::mutex> lock(mutex);
        priced.push_back(std::move(*best));
      }
    }
  };
  int64_t threads =
      request.threads > 0
          ? request.threads
          : std::max<int64_t>(1, std::thread::hardware_concurrency());
  threads = std::min<int64_t>(threads, candidates.size());
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &thread : pool)
    thread.join();
  result.candidatesEvaluated = evaluated;
  result.candidatesPruned = pruned;
  result.candidatesRejected = rejected;
  if (priced.empty()) {
    error = "no candidate plan compiled; the first refusal: " + firstError;
    return std::nullopt;
  }
  // Fastest first among those that fit; the rest by memory.
  std::sort(priced.begin(), priced.end(),
            [](const PlanEvaluation &a, const PlanEvaluation &b) {
              if (a.fits != b.fits)
                return a.fits;
              if (a.fits)
                return a.time.seconds < b.time.seconds;
              return a.peakBytes() < b.peakBytes();
            });
  // The shown plans get the compiler's memory plan; one that does not fit
  // after all gives its place to the next.
  for (PlanEvaluation &evaluation : priced) {
    if (!evaluation.fits ||
        static_cast<int64_t>(result.plans.size()) >= request.top)
      break;
    std::string why;
    if (!measureMemory(request, evaluation, why)) {
      ++result.candidatesRejected;
      continue;
    }
    if (evaluation.fits)
      result.plans.push_back(evaluation);
    else if (!result.closest ||
             evaluation.peakBytes() < result.closest->peakBytes())
      result.closest = evaluation;
  }
  for (const PlanEvaluation &evaluation : priced)
    result.candidates.push_back(
        {evaluation.choice.text(), evaluation.time.seconds,
         evaluation.tokensPerSecondPerGpu, evaluation.peakBytes(),
         evaluation.fits, evaluation.exactMemory});
  if (result.plans.empty() && !result.closest) {
    PlanEvaluation closest = priced.front();
    for (const PlanEvaluation &evaluation : priced)
      if (evaluation.peakBytes() < closest.peakBytes())
        closest = evaluation;
    result.closest = closest;
  }
  result.shortModelCompiles = composer ? composer->compiles() : 0;
  result.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

} // namespace trellis::planner
