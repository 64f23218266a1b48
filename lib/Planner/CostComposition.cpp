//===- CostComposition.cpp - A plan's cost from short models --------------===//

#include "trellis/Planner/CostComposition.h"

#include "PlanCompile.h"

#include "trellis/Frontend/ModelImporter.h"

#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

namespace trellis::planner {

namespace {

using Phase = PricedWork::Phase;

/// The micro-batch sizes and data-parallel degrees the short models are
/// compiled at. Odd sizes keep a token dimension from equalling a model
/// dimension, so matmul pieces of different kinds stay apart.
constexpr int64_t kSmallMicroBatch = 3, kLargeMicroBatch = 5;
constexpr int64_t kSmallDp = 2, kLargeDp = 4;

/// A priced work's identity: what the cost query groups ops by.
struct TermKey {
  Phase phase = Phase::Step;
  int64_t chunk = 0;
  std::string name, dtype;
  int64_t rows = 0, columns = 0, depth = 0;
  bool causal = false, hidden = false;

  auto tie() const {
    return std::tie(phase, chunk, name, dtype, rows, columns, depth, causal,
                    hidden);
  }
  bool operator<(const TermKey &other) const { return tie() < other.tie(); }
  /// The same ops, whatever their piece's dimensions.
  bool sameKind(const TermKey &other) const {
    return phase == other.phase && chunk == other.chunk && name == other.name &&
           dtype == other.dtype && causal == other.causal &&
           hidden == other.hidden;
  }
};

/// A priced work's additive values.
struct TermValues {
  double calls = 0, flops = 0, bytesRead = 0, bytesWritten = 0;
  double count = 0, bytes = 0, wireBytes = 0;

  void add(const TermValues &other, double scale) {
    calls += scale * other.calls;
    flops += scale * other.flops;
    bytesRead += scale * other.bytesRead;
    bytesWritten += scale * other.bytesWritten;
    count += scale * other.count;
    bytes += scale * other.bytes;
    wireBytes += scale * other.wireBytes;
  }
  bool negligible() const {
    for (double value :
         {calls, flops, bytesRead, bytesWritten, count, bytes, wireBytes})
      if (std::abs(value) > 1e-6)
        return false;
    return true;
  }
};

/// The memory terms of a rank (or part), in bytes; `saved` and
/// `weightInputs` are one model chunk's (ShardedStepCost's per-chunk
/// terms).
struct MemoryTerms {
  double parameters = 0, optimizer = 0, gradients = 0, saved = 0,
         weightInputs = 0;

  void add(const MemoryTerms &other, double scale) {
    parameters += scale * other.parameters;
    optimizer += scale * other.optimizer;
    gradients += scale * other.gradients;
    saved += scale * other.saved;
    weightInputs += scale * other.weightInputs;
  }
};

/// One rank's cost, or a part of it, as sums that add.
struct Terms {
  std::map<TermKey, TermValues> work;
  MemoryTerms memory;

  void add(const Terms &other, double scale) {
    for (const auto &[key, values] : other.work)
      work[key].add(values, scale);
    memory.add(other.memory, scale);
  }
  void dropNegligible() {
    for (auto it = work.begin(); it != work.end();)
      it = it->second.negligible() ? work.erase(it) : std::next(it);
  }
};

Terms termsOf(const ShardedStepCost &cost) {
  Terms terms;
  for (const PricedWork &work : cost.work) {
    TermKey key{work.phase,     work.chunk,    work.name,
                work.dtype,     work.gemmRows, work.gemmColumns,
                work.gemmDepth, work.causal,   work.hidden};
    TermValues &values = terms.work[key];
    values.calls += work.calls;
    values.flops += work.flops;
    values.bytesRead += work.bytesRead;
    values.bytesWritten += work.bytesWritten;
    values.count += work.traffic.count;
    values.bytes += work.traffic.bytes;
    values.wireBytes += work.traffic.wireBytes;
  }
  terms.memory.parameters = cost.parameterBytes;
  terms.memory.optimizer = cost.optimizerStateBytes;
  terms.memory.gradients = cost.gradientBytes;
  for (int64_t bytes : cost.savedActivationBytes)
    terms.memory.saved += bytes;
  for (int64_t bytes : cost.weightGradientInputBytes)
    terms.memory.weightInputs += bytes;
  return terms;
}

/// `value` rounded to a whole count (of calls or bytes), none negative.
int64_t whole(double value) {
  return std::max<int64_t>(0, std::llround(value));
}

/// The priced work of `key` with `values` (rounded to whole calls and
/// bytes).
PricedWork workOf(const TermKey &key, const TermValues &values) {
  PricedWork work;
  work.phase = key.phase;
  work.chunk = key.chunk;
  work.name = key.name;
  work.dtype = key.dtype;
  work.gemmRows = key.rows;
  work.gemmColumns = key.columns;
  work.gemmDepth = key.depth;
  work.causal = key.causal;
  work.hidden = key.hidden;
  work.calls = whole(values.calls);
  work.flops = std::max(0.0, values.flops);
  work.bytesRead = whole(values.bytesRead);
  work.bytesWritten = whole(values.bytesWritten);
  work.traffic.count = whole(values.count);
  work.traffic.bytes = whole(values.bytes);
  work.traffic.wireBytes = whole(values.wireBytes);
  return work;
}

/// `terms` without the pipeline's transfers (what a stage sends to and
/// receives from its neighbours).
Terms withoutTransfers(const Terms &terms) {
  Terms result = terms;
  for (auto it = result.work.begin(); it != result.work.end();) {
    llvm::StringRef name = it->first.name;
    bool transfer =
        it->first.dtype.empty() &&
        (name.starts_with("send over ") || name.starts_with("recv over "));
    it = transfer ? result.work.erase(it) : std::next(it);
  }
  return result;
}

/// `a - times * b`, without the terms that cancel.
Terms difference(const Terms &a, const Terms &b, double times = 1) {
  Terms result = a;
  result.add(b, -times);
  result.dropNegligible();
  return result;
}

/// A part's cost as lines in the micro-batch size and in 1/dp, from its
/// cost at (small micro-batch, small dp), (small, large dp) and (large
/// micro-batch, small dp).
struct FittedPart {
  struct Term {
    TermKey key;
    /// Dimensions grow per sequence of the micro-batch.
    double rowsSlope = 0, columnsSlope = 0, depthSlope = 0;
    TermValues base, perSequence, perInverseDp;
  };
  std::vector<Term> terms;
  MemoryTerms base, perSequence, perInverseDp;

  /// The part at `sequences` per micro-batch and data-parallel degree `dp`.
  Terms at(double sequences, double dp) const {
    double ds = sequences - kSmallMicroBatch;
    double du = 1.0 / dp - 1.0 / kSmallDp;
    Terms result;
    for (const Term &term : terms) {
      TermKey key = term.key;
      key.rows = std::llround(key.rows + term.rowsSlope * ds);
      key.columns = std::llround(key.columns + term.columnsSlope * ds);
      key.depth = std::llround(key.depth + term.depthSlope * ds);
      TermValues &values = result.work[key];
      values.add(term.base, 1);
      values.add(term.perSequence, ds);
      values.add(term.perInverseDp, du);
    }
    result.memory.add(base, 1);
    result.memory.add(perSequence, ds);
    result.memory.add(perInverseDp, du);
    return result;
  }
};

/// Whether `large` is `small`'s piece with `kLargeMicroBatch` sequences
/// where `small` had `kSmallMicroBatch`: one dimension grown in that
/// proportion (a token dimension), or none (a piece without tokens).
bool grownPiece(const TermKey &small, const TermKey &large, int grown) {
  auto grows = [](int64_t a, int64_t b) {
    return a * kLargeMicroBatch == b * kSmallMicroBatch;
  };
  int64_t dims[3][2] = {{small.rows, large.rows},
                        {small.columns, large.columns},
                        {small.depth, large.depth}};
  for (int d = 0; d < 3; ++d) {
    bool same = dims[d][0] == dims[d][1];
    if (d == grown ? !grows(dims[d][0], dims[d][1]) || same : !same)
      return false;
  }
  return true;
}

/// Fits `small` (small micro-batch, small dp), `wide` (small micro-batch,
/// large dp; null: dp 1, no line in 1/dp) and `large` (large micro-batch,
/// small dp). Fails when a term of one has no partner in the other.
std::optional<FittedPart> fitPart(const Terms &small, const Terms *wide,
                                  const Terms &large, std::string &error) {
  FittedPart part;
  double sequenceStep = kLargeMicroBatch - kSmallMicroBatch;
  double inverseDpStep = 1.0 / kLargeDp - 1.0 / kSmallDp;
  // Pairs each small-micro-batch term with its large one: unique
  // candidates first, until none is left.
  std::vector<std::pair<TermKey, TermValues>> pending(small.work.begin(),
                                                      small.work.end());
  std::map<TermKey, TermValues> unpaired = large.work;
  while (!pending.empty()) {
    bool progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      const auto &[key, values] = *it;
      std::vector<std::pair<decltype(unpaired)::iterator, int>> found;
      for (auto candidate = unpaired.begin(); candidate != unpaired.end();
           ++candidate) {
        if (!candidate->first.sameKind(key) ||
            std::abs(candidate->second.calls - values.calls) > 1e-6)
          continue;
        for (int grown = -1; grown < 3; ++grown)
          if (grownPiece(key, candidate->first, grown))
            found.push_back({candidate, grown});
      }
      if (found.size() != 1) {
        ++it;
        continue;
      }
      auto [partner, grown] = found.front();
      FittedPart::Term term;
      term.key = key;
      double slopes[3] = {0, 0, 0};
      if (grown >= 0)
        slopes[grown] = (grown == 0   ? partner->first.rows - key.rows
                         : grown == 1 ? partner->first.columns - key.columns
                                      : partner->first.depth - key.depth) /
                        sequenceStep;
      term.rowsSlope = slopes[0];
      term.columnsSlope = slopes[1];
      term.depthSlope = slopes[2];
      term.base = values;
      term.perSequence.add(partner->second, 1 / sequenceStep);
      term.perSequence.add(values, -1 / sequenceStep);
      if (wide) {
        auto same = wide->work.find(key);
        if (same == wide->work.end()) {
          error = "a priced work of the short model at dp " +
                  std::to_string(kSmallDp) + " (" + key.name +
                  ") has none at dp " + std::to_string(kLargeDp);
          return std::nullopt;
        }
        term.perInverseDp.add(same->second, 1 / inverseDpStep);
        term.perInverseDp.add(values, -1 / inverseDpStep);
      }
      part.terms.push_back(term);
      unpaired.erase(partner);
      it = pending.erase(it);
      progress = true;
    }
    if (!progress) {
      error = llvm::formatv("the short models' {0} at {1} and {2} sequences "
                            "per micro-batch do not pair",
                            pending.front().first.name, kSmallMicroBatch,
                            kLargeMicroBatch)
                  .str();
      return std::nullopt;
    }
  }
  if (!unpaired.empty()) {
    error = "the short model at " + std::to_string(kLargeMicroBatch) +
            " sequences per micro-batch prices " +
            unpaired.begin()->first.name + " that it does not at " +
            std::to_string(kSmallMicroBatch);
    return std::nullopt;
  }
  if (wide && wide->work.size() != small.work.size()) {
    error = "the short models at dp " + std::to_string(kSmallDp) + " and " +
            std::to_string(kLargeDp) + " price different work";
    return std::nullopt;
  }
  part.base = small.memory;
  part.perSequence.add(large.memory, 1 / sequenceStep);
  part.perSequence.add(small.memory, -1 / sequenceStep);
  if (wide) {
    part.perInverseDp.add(wide->memory, 1 / inverseDpStep);
    part.perInverseDp.add(small.memory, -1 / inverseDpStep);
  }
  return part;
}

/// What the parts of a layout depend on besides dp, pp, the schedule's
/// order and the micro-batch count and size.
struct LayoutKey {
  int64_t tp = 1, cp = 1, ep = 1, zero = 0;
  bool sequenceParallel = false, dataParallel = false, pipelined = false,
       splitsWeights = false, oneMicroBatch = false,
       fuseGradientAccumulation = true, scheduleCollectives = true;
  std::string contextKind, recompute;

  auto tie() const {
    return std::tie(tp, cp, ep, zero, sequenceParallel, dataParallel, pipelined,
                    splitsWeights, oneMicroBatch, fuseGradientAccumulation,
                    scheduleCollectives, contextKind, recompute);
  }
  bool operator<(const LayoutKey &other) const { return tie() < other.tie(); }
};

/// A layout's parts. Without a pipeline: `first` is what the one rank
/// costs besides its layers.
struct LayoutParts {
  FittedPart layer, first, middle, last;
  std::vector<MeshAxis> meshAxes;
};

/// A value computed once, on first use, shared by threads.
template <typename Value> struct OnceSlot {
  std::once_flag once;
  std::optional<Value> value;
  std::string error;
};

template <typename Key, typename Value> class OnceCache {
public:
  /// The slot of `key`, filled by `make(value, error)` on first use.
  template <typename Make> OnceSlot<Value> &get(const Key &key, Make make) {
    std::shared_ptr<OnceSlot<Value>> slot;
    {
      std::lock_guard<std::mutex> lock(mutex);
      std::shared_ptr<OnceSlot<Value>> &entry = slots[key];
      if (!entry)
        entry = std::make_shared<OnceSlot<Value>>();
      slot = entry;
    }
    std::call_once(slot->once, [&] { slot->value = make(slot->error); });
    return *slot;
  }

private:
  std::mutex mutex;
  std::map<Key, std::shared_ptr<OnceSlot<Value>>> slots;
};

/// `text` (a config) with `layers` layers, or empty when a field it
/// cannot cut holds.
std::string withLayers(const llvm::json::Object &config, int64_t layers) {
  llvm::json::Object cut = config;
  bool counted = false;
  for (const char *key : {"num_hidden_layers", "n_layer"})
    if (cut.get(key)) {
      cut[key] = layers;
      counted = true;
    }
  if (!counted)
    return "";
  if (llvm::json::Array *kinds = cut.getArray("layer_types")) {
    if (static_cast<int64_t>(kinds->size()) < layers)
      return "";
    llvm::json::Array kept;
    for (int64_t layer = 0; layer < layers; ++layer)
      kept.push_back((*kinds)[layer]);
    *kinds = std::move(kept);
  }
  if (llvm::json::Array *dense = cut.getArray("mlp_only_layers")) {
    llvm::json::Array kept;
    for (const llvm::json::Value &layer : *dense)
      if (std::optional<int64_t> index = layer.getAsInteger();
          index && *index < layers)
        kept.push_back(*index);
    *dense = std::move(kept);
  }
  if (std::optional<int64_t> dense = cut.getInteger("first_k_dense_replace"))
    cut["first_k_dense_replace"] = std::min(*dense, layers);
  std::string text;
  llvm::raw_string_ostream stream(text);
  stream << llvm::json::Value(std::move(cut));
  return text;
}

/// Whether every layer of `config` builds the same ops.
bool layersAlike(const TransformerConfig &config) {
  for (int64_t layer = 1; layer < config.numLayers; ++layer)
    if (config.windowOf(layer) != config.windowOf(0) ||
        config.isSparseLayer(layer) != config.isSparseLayer(0))
      return false;
  return true;
}

} // namespace

struct CostComposer::Impl {
  PlanRequest request;
  int64_t layers = 0;
  /// The whole model's parameters (tied embeddings counted once).
  int64_t parameters = 0;
  /// The model's loss reads every layer (a mixture's load-balancing or z
  /// loss): its last pipeline stage's work grows with the layers before.
  bool poolsOverLayers = false;
  /// The model cut to 1 (the stage balancer's part costs), 2 and 3 layers.
  std::map<int64_t, std::string> shortModels;
  OnceCache<LayoutKey, LayoutParts> parts;
  /// The stage balancer's part costs per micro-batch size in sequences.
  OnceCache<int64_t, StagedModelCost> partCosts;
  /// The compiler's stage split per (sequences, schedule, pp, micro-batches,
  /// chunks).
  OnceCache<std::tuple<int64_t, std::string, int64_t, int64_t, int64_t>,
            StageLayers>
      splits;
  std::atomic<int64_t> compiles{0};

  /// The short model of `layers` layers compiled at `choice` with
  /// `microBatches` micro-batches (cut `stageLayers` over a pipeline).
  std::optional<CompiledModel>
  compileShort(int64_t layers, const PlanChoice &choice, int64_t microBatches,
               const std::string &stageLayers, std::string &error) {
    PlanRequest shortRequest = request;
    shortRequest.globalBatch =
        choice.batchRanks() * choice.microBatchSize * microBatches;
    CompileOptions options = compileOptionsOf(shortRequest, choice);
    if (!stageLayers.empty())
      options.stageLayers = stageLayers;
    options.emitEstimate = true;
    ++compiles;
    return compilePlanModel(shortRequest, shortModels.at(layers), options,
                            error);
  }

  /// The parts of `key`'s layout at one micro-batch size and dp: layer,
  /// then first, middle and last (one rank: the rest of it as first).
  /// The first call records the mesh.
  std::optional<std::array<Terms, 4>> partsAt(const LayoutKey &key,
                                              int64_t sequences, int64_t dp,
                                              LayoutParts &fitted,
                                              std::string &error) {
    PlanChoice choice;
    // A pipeline of three stages of a layer each, or none.
    choice.mesh =
        meshOfDegrees(key.pipelined ? 3 : 1, dp, key.ep, key.cp, key.tp);
    CompileOptions &settings = choice.settings;
    settings.zero = key.zero;
    settings.sequenceParallel = key.sequenceParallel;
    if (!key.contextKind.empty())
      settings.contextKind = key.contextKind;
    settings.recompute = key.recompute;
    settings.fuseGradientAccumulation = key.fuseGradientAccumulation;
    settings.scheduleCollectives = key.scheduleCollectives;
    choice.microBatchSize = sequences;
    // Without a pipeline, two micro-batches price gradient accumulation;
    // a pipeline of three stages runs three.
    int64_t microBatches = key.oneMicroBatch ? 1 : 2;
    // Two layers and more: a model's ops that pool over its layers (a
    // mixture's load-balancing loss) take a form of their own at one.
    int64_t shortLayers = 2;
    std::array<Terms, 4> result;
    if (key.pipelined) {
      // Three stages of a layer each: the middle one is a layer and its
      // transfers; the first and last add the embedding and the head.
      settings.schedule = key.splitsWeights ? "zb-h1" : "1f1b";
      std::optional<CompiledModel> cut =
          compileShort(3, choice, /*microBatches=*/3, "1,1,1", error);
      if (!cut)
        return std::nullopt;
      std::vector<Terms> stages;
      for (const ShardedStepCost &cost : cut->estimate)
        stages.push_back(termsOf(cost));
      result[0] = withoutTransfers(stages[1]);
      for (int stage = 0; stage < 3; ++stage)
        result[stage + 1] = difference(stages[stage], result[0]);
      if (fitted.meshAxes.empty())
        fitted.meshAxes = cut->meshAxes;
      return result;
    }
    std::optional<CompiledModel> even =
        compileShort(shortLayers, choice, microBatches, "", error);
    if (!even)
      return std::nullopt;
    std::optional<CompiledModel> longer =
        compileShort(shortLayers + 1, choice, microBatches, "", error);
    if (!longer)
      return std::nullopt;
    // A layer: what one more adds; the rest of the rank: the short model
    // without its layers.
    result[0] =
        difference(termsOf(longer->estimate[0]), termsOf(even->estimate[0]));
    result[1] = difference(termsOf(even->estimate[0]), result[0], shortLayers);
    if (fitted.meshAxes.empty())
      fitted.meshAxes = even->meshAxes;
    return result;
  }

  std::optional<LayoutParts> fitLayout(const LayoutKey &key,
                                       std::string &error) {
    LayoutParts fitted;
    int64_t smallDp = key.dataParallel ? kSmallDp : 1;
    auto small = partsAt(key, kSmallMicroBatch, smallDp, fitted, error);
    if (!small)
      return std::nullopt;
    std::optional<std::array<Terms, 4>> wide;
    if (key.dataParallel) {
      wide = partsAt(key, kSmallMicroBatch, kLargeDp, fitted, error);
      if (!wide)
        return std::nullopt;
    }
    auto large = partsAt(key, kLargeMicroBatch, smallDp, fitted, error);
    if (!large)
      return std::nullopt;
    FittedPart *targets[4] = {&fitted.layer, &fitted.first, &fitted.middle,
                              &fitted.last};
    int parts = key.pipelined ? 4 : 2;
    for (int part = 0; part < parts; ++part) {
      std::optional<FittedPart> fit =
          fitPart((*small)[part], wide ? &(*wide)[part] : nullptr,
                  (*large)[part], error);
      if (!fit)
        return std::nullopt;
      *targets[part] = std::move(*fit);
    }
    return fitted;
  }

  /// The fitted parts of `choice`'s layout, or null with `error`.
  const LayoutParts *partsFor(const PlanChoice &choice, std::string &error) {
    int64_t microBatches = choice.microBatches(request.globalBatch);
    if (!choice.describedByDegrees() || choice.settings.zeroAxes) {
      error = "a mesh of other axes than pp, dp, ep, cp and tp (HSDP's), "
              "or ZeRO over some of the data axes, compiles whole";
      return nullptr;
    }
    const CompileOptions &settings = choice.settings;
    int64_t tp = choice.degree(AxisRole::Tensor),
            cp = choice.degree(AxisRole::Context);
    LayoutKey key;
    key.tp = tp;
    key.cp = cp;
    key.ep = choice.degree(AxisRole::Expert);
    key.dataParallel = choice.degree(AxisRole::Data) > 1;
    key.zero = choice.batchRanks() > 1 ? settings.zero : 0;
    key.sequenceParallel = settings.sequenceParallel && tp > 1;
    key.contextKind = cp > 1 ? settings.contextKind : "";
    key.recompute = settings.recompute;
    key.fuseGradientAccumulation = settings.fuseGradientAccumulation;
    key.scheduleCollectives = settings.scheduleCollectives;
    key.pipelined = choice.degree(AxisRole::Pipeline) > 1;
    key.splitsWeights = key.pipelined && choice.schedule() == "zb-h1";
    key.oneMicroBatch = !key.pipelined && microBatches == 1;
    if (key.pipelined && poolsOverLayers) {
      error = "a loss pooled over all layers reaches the last stage from every "
              "stage: pipelines compile whole";
      return nullptr;
    }
    OnceSlot<LayoutParts> &slot =
        parts.get(key, [&](std::string &why) { return fitLayout(key, why); });
    if (!slot.value) {
      error = slot.error;
      return nullptr;
    }
    return &*slot.value;
  }

  std::optional<StageLayers> splitOf(const PlanChoice &choice,
                                     int64_t microBatches, std::string &error) {
    int64_t sequences = choice.batchRanks() * choice.microBatchSize;
    OnceSlot<StagedModelCost> &cost = partCosts.get(
        sequences, [&](std::string &why) -> std::optional<StagedModelCost> {
          std::optional<ModelPipelineCost> shortCost =
              pipelineCostOf(request, shortModels.at(1), sequences, why);
          if (!shortCost)
            return std::nullopt;
          StagedModelCost model = shortCost->parts;
          model.layers.assign(layers, shortCost->parts.layers.front());
          return model;
        });
    if (!cost.value) {
      error = cost.error;
      return std::nullopt;
    }
    int64_t chunks = choice.chunksPerRank();
    int64_t pp = choice.degree(AxisRole::Pipeline);
    std::string schedule = choice.schedule();
    OnceSlot<StageLayers> &split = splits.get(
        {sequences, schedule, pp, microBatches, chunks},
        [&](std::string &why) -> std::optional<StageLayers> {
          std::optional<ScheduleKind> kind = parseScheduleKind(schedule);
          if (!kind) {
            why = "unknown schedule '" + schedule + "'";
            return std::nullopt;
          }
          PipelineShape shape{pp, microBatches, chunks};
          std::optional<PipelineStreams> streams =
              buildSchedule(*kind, shape, &why);
          if (!streams)
            return std::nullopt;
          return chooseStageLayers(*cost.value, "", *streams, shape,
                                   ModelPipelineCost::forwardShare, &why);
        });
    if (!split.value) {
      error = split.error;
      return std::nullopt;
    }
    return *split.value;
  }
};

std::optional<ComposedCost> compileWholeCost(const PlanRequest &request,
                                             const PlanChoice &choice,
                                             std::string &error) {
  CompileOptions options = compileOptionsOf(request, choice);
  options.emitEstimate = true;
  std::optional<CompiledModel> compiled =
      compilePlanModel(request, request.modelText, options, error);
  if (!compiled)
    return std::nullopt;
  return ComposedCost{std::move(compiled->estimate),
                      std::move(compiled->meshAxes), compiled->modelParameters};
}

CostComposer::CostComposer(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
CostComposer::~CostComposer() = default;

std::unique_ptr<CostComposer> CostComposer::create(const PlanRequest &request,
                                                   std::string &why) {
  if (request.format != ModelFormat::Config) {
    why = "an MLIR model is compiled whole";
    return nullptr;
  }
  llvm::Expected<TransformerConfig> config =
      parseTransformerConfig(request.modelText);
  if (!config) {
    why = llvm::toString(config.takeError());
    return nullptr;
  }
  if (!layersAlike(*config)) {
    why = "its layers differ (sliding windows or dense and sparse MLPs)";
    return nullptr;
  }
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(request.modelText);
  if (!json || !json->getAsObject()) {
    if (!json)
      llvm::consumeError(json.takeError());
    why = "the config is not a JSON object";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->request = request;
  impl->layers = config->numLayers;
  impl->parameters = config->numParameters();
  impl->poolsOverLayers =
      config->experts.count > 0 && (config->experts.auxLossCoefficient > 0 ||
                                    config->experts.zLossCoefficient > 0);
  for (int64_t layers = 1; layers <= 3; ++layers) {
    std::string text = withLayers(*json->getAsObject(), layers);
    if (text.empty()) {
      why = "its layer count cannot be cut";
      return nullptr;
    }
    impl->shortModels[layers] = std::move(text);
  }
  return std::unique_ptr<CostComposer>(new CostComposer(std::move(impl)));
}

int64_t CostComposer::compiles() const { return impl->compiles; }

/// Seconds of `terms`' compute on `cluster`: its actions' (one
/// micro-batch) and its step's.
static std::pair<double, double> computeOf(const Terms &terms,
                                           const ClusterSpec &cluster) {
  std::pair<double, double> seconds{0, 0};
  for (const auto &[key, values] : terms.work) {
    if (!key.dtype.empty())
      (key.phase == Phase::Step ? seconds.second : seconds.first) +=
          computeSeconds(workOf(key, values), cluster);
  }
  return seconds;
}

std::optional<double> CostComposer::lowerBound(const PlanChoice &choice,
                                               const ClusterSpec &cluster) {
  // Another mesh of the same degrees (HSDP's) does the same compute, and
  // its ZeRO over fewer ranks leaves each rank at least as much of the
  // optimizer's: the mesh of degrees bounds it.
  PlanChoice plain = choice;
  int64_t pp = choice.degree(AxisRole::Pipeline);
  plain.mesh = meshOfDegrees(
      pp, choice.degree(AxisRole::Data), choice.degree(AxisRole::Expert),
      choice.degree(AxisRole::Context), choice.degree(AxisRole::Tensor));
  plain.settings.zeroAxes.reset();
  std::string error;
  const LayoutParts *parts = impl->partsFor(plain, error);
  if (!parts)
    return std::nullopt;
  double sequences = static_cast<double>(choice.microBatchSize);
  double dp = static_cast<double>(choice.degree(AxisRole::Data));
  // Every rank's work in one sum: merged terms price at most what they
  // price apart (an op's time is the longer of its FLOPs and its bytes).
  Terms all = parts->first.at(sequences, dp);
  all.add(parts->layer.at(sequences, dp), static_cast<double>(impl->layers));
  if (pp > 1) {
    int64_t chunks = choice.chunksPerRank();
    all.add(parts->middle.at(sequences, dp),
            static_cast<double>(pp * chunks - 2));
    all.add(parts->last.at(sequences, dp), 1);
  }
  auto [actions, step] = computeOf(all, cluster);
  // The busiest rank does at least the average rank's work.
  return (choice.microBatches(impl->request.globalBatch) * actions + step) / pp;
}

std::optional<ComposedCost> CostComposer::compose(const PlanChoice &choice,
                                                  std::string &error) {
  int64_t microBatches = choice.microBatches(impl->request.globalBatch);
  const LayoutParts *fitted = impl->partsFor(choice, error);
  if (!fitted)
    return std::nullopt;
  const LayoutParts &parts = *fitted;
  double sequences = static_cast<double>(choice.microBatchSize);
  int64_t pp = choice.degree(AxisRole::Pipeline);
  double dp = static_cast<double>(choice.degree(AxisRole::Data));
  Terms layer = parts.layer.at(sequences, dp);

  // Each virtual stage's parts, onto its rank as its chunk.
  int64_t chunks = choice.chunksPerRank();
  std::vector<Terms> ranks(pp);
  std::vector<std::vector<double>> saved(pp, std::vector<double>(chunks, 0)),
      weightInputs = saved;
  auto place = [&](int64_t stage, const Terms &stageTerms) {
    int64_t rank = stage % pp, chunk = stage / pp;
    for (const auto &[stageKey, values] : stageTerms.work) {
      TermKey key = stageKey;
      if (key.phase != Phase::Step)
        key.chunk = chunk;
      ranks[rank].work[key].add(values, 1);
    }
    MemoryTerms memory = stageTerms.memory;
    saved[rank][chunk] += memory.saved;
    weightInputs[rank][chunk] += memory.weightInputs;
    memory.saved = memory.weightInputs = 0;
    ranks[rank].memory.add(memory, 1);
  };
  if (pp == 1) {
    Terms rank = parts.first.at(sequences, dp);
    rank.add(layer, static_cast<double>(impl->layers));
    place(0, rank);
  } else {
    std::optional<StageLayers> split =
        impl->splitOf(choice, microBatches, error);
    if (!split)
      return std::nullopt;
    int64_t stages = static_cast<int64_t>(split->size());
    Terms first = parts.first.at(sequences, dp);
    Terms middle = parts.middle.at(sequences, dp);
    Terms last = parts.last.at(sequences, dp);
    for (int64_t stage = 0; stage < stages; ++stage) {
      Terms stageTerms = stage == 0            ? first
                         : stage == stages - 1 ? last
                                               : middle;
      stageTerms.add(layer, static_cast<double>((*split)[stage]));
      place(stage, stageTerms);
    }
  }

  ComposedCost result;
  for (auto [rank, terms] : llvm::enumerate(ranks)) {
    ShardedStepCost cost;
    for (const auto &[key, values] : terms.work) {
      if (values.negligible())
        continue;
      PricedWork work = workOf(key, values);
      int64_t times = work.phase == Phase::Step ? 1 : microBatches;
      if (!work.dtype.empty()) {
        cost.flops += work.flops * times;
        cost.bytesRead += work.bytesRead * times;
        cost.bytesWritten += work.bytesWritten * times;
      }
      cost.work.push_back(std::move(work));
    }
    cost.parameterBytes = whole(terms.memory.parameters);
    cost.optimizerStateBytes = whole(terms.memory.optimizer);
    cost.gradientBytes = whole(terms.memory.gradients);
    for (double chunkBytes : saved[rank])
      cost.savedActivationBytes.push_back(whole(chunkBytes));
    for (double chunkBytes : weightInputs[rank])
      cost.weightGradientInputBytes.push_back(whole(chunkBytes));
    result.ranks.push_back(std::move(cost));
  }
  for (MeshAxis axis : parts.meshAxes) {
    if (axis.name == "dp")
      axis.size = static_cast<int64_t>(dp);
    else if (axis.name == "pp")
      axis.size = pp;
    result.meshAxes.push_back(axis);
  }
  result.modelParameters = impl->parameters;
  return result;
}

} // namespace trellis::planner
