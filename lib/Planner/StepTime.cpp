//===- StepTime.cpp - A plan's step time on a cluster ---------------------===//

#include "trellis/Planner/StepTime.h"

#include "trellis/Common/OpContract.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

namespace trellis::planner {

namespace {

using Phase = PricedWork::Phase;


/// A collective's or transfer's key split: `all_reduce over dp tp`.
struct CollectiveKey {
  /// Its kind, when its name is one (CollectiveKind's).
  std::optional<CollectiveKind> kind;
  std::string kindName;
  std::vector<std::string> axes;

  bool is(CollectiveKind other) const { return kind == other; }
  /// Point to point between neighbours: sends, receives, permutes and
  /// broadcasts share the measured rate of sends.
  bool pointToPoint() const {
    return is(CollectiveKind::Send) || is(CollectiveKind::Recv) ||
           is(CollectiveKind::CollectivePermute) ||
           is(CollectiveKind::Broadcast);
  }
  bool transfer() const {
    return is(CollectiveKind::Send) || is(CollectiveKind::Recv);
  }
};

/// The collective of priced work called `KIND over AXES...`; nullopt for
/// other work.
std::optional<CollectiveKey> parseKey(llvm::StringRef name) {
  auto [kind, rest] = name.split(" over ");
  if (rest.empty())
    return std::nullopt;
  CollectiveKey key;
  key.kindName = kind.str();
  CollectiveKind found;
  if (findCollectiveKind(key.kindName, found))
    key.kind = found;
  llvm::SmallVector<llvm::StringRef> axes;
  rest.split(axes, ' ', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef axis : axes)
    key.axes.push_back(axis.str());
  return key;
}

/// How a group over some mesh axes sits on the nodes.
struct GroupSpan {
  int64_t size = 1;
  /// Members on each node the group touches (rank 0's node).
  int64_t perNode = 1;
  bool spansNodes() const { return perNode < size; }
};

std::optional<GroupSpan> spanOf(const CollectiveKey &key,
                                const StepLayout &layout,
                                const ClusterSpec &cluster,
                                std::string &error) {
  // Strides of the axes, major to minor: the minor axis's ranks are
  // adjacent.
  std::vector<int64_t> strides(layout.axes.size(), 1);
  for (int64_t i = static_cast<int64_t>(layout.axes.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * layout.axes[i + 1].size;
  std::vector<int64_t> members{0};
  for (const std::string &name : key.axes) {
    auto axis = std::find_if(layout.axes.begin(), layout.axes.end(),
                             [&](const MeshAxis &a) { return a.name == name; });
    if (axis == layout.axes.end()) {
      error = "collective '" + key.kindName + " over " + name +
              "' names an axis the mesh does not have";
      return std::nullopt;
    }
    int64_t stride = strides[axis - layout.axes.begin()];
    std::vector<int64_t> grown;
    for (int64_t member : members)
      for (int64_t c = 0; c < axis->size; ++c)
        grown.push_back(member + c * stride);
    members = std::move(grown);
  }
  GroupSpan span;
  span.size = static_cast<int64_t>(members.size());
  span.perNode = std::count_if(members.begin(), members.end(), [&](int64_t r) {
    return r < cluster.devicesPerNode;
  });
  span.perNode = std::max<int64_t>(span.perNode, 1);
  return span;
}

bool overDataAxesOnly(const CollectiveKey &key, const StepLayout &layout) {
  for (const std::string &name : key.axes) {
    auto axis = std::find_if(layout.axes.begin(), layout.axes.end(),
                             [&](const MeshAxis &a) { return a.name == name; });
    if (axis == layout.axes.end() || !splitsBatch(axis->role))
      return false;
  }
  return true;
}

/// What of `communication` running beside `compute` stays exposed when
/// the device hides `overlap` of it (a CPU's communication thread takes
/// cores the kernels use).
double unhiddenSeconds(double communication, double compute, double overlap) {
  return communication * (1 - overlap) +
         std::max(0.0, communication * overlap - compute);
}

} // namespace

double computeSeconds(const PricedWork &work, const ClusterSpec &cluster) {
  if (work.dtype.empty() && parseKey(work.name))
    return 0;
  const DeviceSpec &device = cluster.device;
  double bytes = static_cast<double>(work.bytesRead + work.bytesWritten);
  double memory = bytes / (device.memoryBandwidth * device.memoryEfficiency);
  double dtypePeak = cluster.peakFlops(work.dtype);
  double seconds = 0;
  auto gemmEfficiency = [&] {
    double efficiency = device.gemmEfficiency;
    for (int64_t size : {work.gemmRows, work.gemmColumns, work.gemmDepth})
      efficiency *= size / (size + device.gemmHalfSize);
    return efficiency;
  };
  // The row of the op a work item names (none for names outside the table:
  // memory-bound).
  const OpContract *row = findOpContract(work.name);
  ComputeClass computeClass =
      row ? row->computeClass : ComputeClass::MemoryBound;
  // gemmDepth is set for whole attention ops (attention, attention_grad),
  // not for ring attention's pieces.
  bool scoresInMemory = device.attentionMaterializesScores &&
                        computeClass == ComputeClass::Attention &&
                        work.gemmDepth > 0;
  // GEMM sizes are known for matmuls (an expert's grouped GEMM has none and
  // is priced by its bytes and FLOPs below).
  if (computeClass == ComputeClass::Gemm && work.gemmRows > 0) {
    seconds = std::max(work.flops / (dtypePeak * gemmEfficiency()), memory);
  } else if (scoresInMemory) {
    // Scores: 4 E d FLOPs forward and 10 E d backward for E scores; each
    // score crosses memory 13 times forward and 26 backward in 16 bits.
    bool backward = row->gradient;
    double scores = work.flops / ((backward ? 10.0 : 4.0) * work.gemmDepth);
    double width = work.dtype == "f32" ? 2.0 : 1.0;
    double scoreBytes = scores * (backward ? 26.0 : 13.0) * width;
    seconds = work.flops / (dtypePeak * gemmEfficiency()) +
              scoreBytes / (device.memoryBandwidth * device.memoryEfficiency);
  } else if (computeClass == ComputeClass::Attention) {
    double flops = work.causal ? work.flops / 2 : work.flops;
    auto measured = device.opEfficiency.find(work.name);
    double efficiency = measured == device.opEfficiency.end()
                            ? device.attentionEfficiency
                            : measured->second;
    seconds = std::max(flops / (dtypePeak * efficiency), memory);
  } else if (auto measured = device.opEfficiency.find(work.name);
             measured != device.opEfficiency.end()) {
    // A measured kernel: its share of the roofline.
    seconds = std::max(bytes / device.memoryBandwidth,
                       work.flops / cluster.peakFlops("f32")) /
              measured->second;
  } else {
    seconds = std::max(memory, work.flops / cluster.peakFlops("f32"));
  }
  return seconds + work.calls * device.kernelOverhead;
}

std::optional<double> communicationSeconds(const PricedWork &work,
                                           const StepLayout &layout,
                                           const ClusterSpec &cluster,
                                           std::string &error) {
  std::optional<CollectiveKey> key = parseKey(work.name);
  if (!key || !work.dtype.empty())
    return 0.0;
  if (!key->kind) {
    error = "priced work '" + work.name + "': '" + key->kindName +
            "' is no collective kind";
    return std::nullopt;
  }
  std::optional<GroupSpan> span = spanOf(*key, layout, cluster, error);
  if (!span)
    return std::nullopt;
  const LinkSpec &intra = cluster.intraNode, &inter = cluster.interNode;
  // Point-to-point kinds share the measured rate of sends.
  std::string rateKind = collectiveKindName(
      key->pointToPoint() ? CollectiveKind::Send : *key->kind);
  double intraRate = intra.rateOf(rateKind);
  double interRate = inter.rateOf(rateKind);
  double wire = static_cast<double>(work.traffic.wireBytes);
  double calls = static_cast<double>(work.traffic.count);
  int64_t n = span->size;
  double latency = span->spansNodes() ? inter.latency : intra.latency;
  double steps = std::ceil(std::log2(std::max<int64_t>(n, 2)));
  if (key->pointToPoint()) {
    // Point to point between neighbours: a hop crosses nodes when the
    // group does.
    double rate = span->spansNodes() ? interRate : intraRate;
    return wire / rate + calls * latency;
  }
  if (key->is(CollectiveKind::AllToAll)) {
    if (!span->spansNodes())
      return wire / intraRate + calls * latency * steps;
    double offNode = wire * static_cast<double>(n - span->perNode) /
                     std::max<int64_t>(n - 1, 1);
    return std::max(offNode / interRate, (wire - offNode) / intraRate) +
           calls * latency * steps;
  }
  // Rings (all_reduce, reduce_scatter, all_gather): across nodes each
  // node's members send over their own network shares, within the node's
  // links.
  double rate = span->spansNodes()
                    ? std::min(intraRate, interRate * span->perNode)
                    : intraRate;
  double perCallSteps = key->is(CollectiveKind::AllReduce) ? 2 * steps : steps;
  return wire / rate + calls * latency * perCallSteps;
}

llvm::json::Object StepTime::toJson() const {
  const RankTime *slowest = nullptr;
  for (const RankTime &rank : ranks)
    if (!slowest || rank.stepEnd > slowest->stepEnd)
      slowest = &rank;
  llvm::json::Object exposed, byOp;
  double compute = 0, bubble = 0, optimizer = 0;
  if (slowest) {
    for (const auto &[key, time] : slowest->exposed)
      exposed[key] = time;
    for (const auto &[op, time] : slowest->computeByOp)
      byOp[op] = time;
    compute = slowest->compute;
    bubble = slowest->bubble;
    optimizer = slowest->optimizer;
  }
  return llvm::json::Object{
      {"step_time_s", seconds},
      {"compute_s", compute},
      {"compute_by_op_s", std::move(byOp)},
      {"exposed_communication_s", std::move(exposed)},
      {"bubble_s", bubble},
      {"optimizer_s", optimizer},
  };
}

std::optional<StepTime>
predictStepTime(const std::vector<ShardedStepCost> &costs,
                const StepLayout &layout, const ClusterSpec &cluster,
                std::string &error) {
  const PipelineShape &shape = layout.pipeline;
  if (static_cast<int64_t>(costs.size()) != shape.ranks) {
    error = llvm::formatv("the estimate has {0} pipeline ranks, the layout {1}",
                          costs.size(), shape.ranks)
                .str();
    return std::nullopt;
  }
  int64_t microBatches = shape.microBatches;
  bool reductionsOverlap = shape.ranks == 1 && microBatches == 1;
  StepTime result;
  result.ranks.resize(shape.ranks);
  // Per virtual stage: one micro-batch's forward, backward and weight
  // actions.
  int64_t stages = shape.virtualStages();
  std::vector<double> forward(stages, 0), backward(stages, 0),
      weight(stages, 0);
  double transfer = 0;
  // The step after the actions, per rank: its compute, the reductions a
  // backward may hide, and the rest.
  std::vector<double> stepCompute(shape.ranks, 0), stepHideable(shape.ranks, 0),
      stepExposed(shape.ranks, 0);
  std::vector<std::map<std::string, double>> stepHideableByKey(shape.ranks);
  for (int64_t rank = 0; rank < shape.ranks; ++rank) {
    RankTime &time = result.ranks[rank];
    // Per (chunk, phase): compute, exposed and hideable communication.
    struct ActionWork {
      double compute = 0, exposed = 0, hideable = 0;
      std::map<std::string, double> exposedByKey, hideableByKey;
    };
    std::map<std::pair<int64_t, Phase>, ActionWork> actions;
    for (const PricedWork &work : costs[rank].work) {
      double compute = computeSeconds(work, cluster);
      if (compute > 0)
        time.computeByOp[work.name] +=
            work.phase == Phase::Step ? compute : compute * microBatches;
      std::optional<double> communication =
          communicationSeconds(work, layout, cluster, error);
      if (!communication)
        return std::nullopt;
      std::optional<CollectiveKey> key =
          work.dtype.empty() ? parseKey(work.name) : std::nullopt;
      if (work.phase == Phase::Step) {
        stepCompute[rank] += compute;
        if (!key)
          continue;
        bool reduction = key->is(CollectiveKind::AllReduce) ||
                         key->is(CollectiveKind::ReduceScatter);
        if (reductionsOverlap && reduction && overDataAxesOnly(*key, layout)) {
          stepHideable[rank] += *communication;
          stepHideableByKey[rank][work.name] += *communication;
        } else {
          stepExposed[rank] += *communication;
          time.exposed[work.name] += *communication;
        }
        continue;
      }
      if (key && key->transfer()) {
        // Everything one action sends to its neighbour, per micro-batch.
        transfer = std::max(transfer, *communication);
        continue;
      }
      ActionWork &action = actions[{work.chunk, work.phase}];
      action.compute += compute;
      if (!key)
        continue;
      if (work.hidden || key->is(CollectiveKind::CollectivePermute) ||
          overDataAxesOnly(*key, layout)) {
        action.hideable += *communication;
        action.hideableByKey[work.name] += *communication;
      } else {
        action.exposed += *communication;
        action.exposedByKey[work.name] += *communication;
      }
    }
    for (auto &[where, action] : actions) {
      auto [chunk, phase] = where;
      double unhidden = unhiddenSeconds(action.hideable, action.compute,
                                        cluster.device.communicationOverlap);
      double duration = action.compute + action.exposed + unhidden;
      int64_t stage = chunk * shape.ranks + rank;
      if (stage >= stages) {
        error = llvm::formatv("work of model chunk {0} on a pipeline of {1} "
                              "chunks",
                              chunk, shape.chunks)
                    .str();
        return std::nullopt;
      }
      (phase == Phase::Forward    ? forward
       : phase == Phase::Backward ? backward
                                  : weight)[stage] += duration;
      time.compute += action.compute * microBatches;
      for (const auto &[key, seconds] : action.exposedByKey)
        time.exposed[key] += seconds * microBatches;
      for (const auto &[key, seconds] : action.hideableByKey)
        if (unhidden > 0)
          time.exposed[key] +=
              seconds / action.hideable * unhidden * microBatches;
    }
    time.compute += stepCompute[rank];
    time.optimizer = stepCompute[rank];
  }
  // The pipeline, simulated with these durations.
  PipelineCosts pipelineCosts;
  pipelineCosts.transfer = transfer;
  pipelineCosts.forwardByStage = forward;
  pipelineCosts.backwardByStage.resize(stages);
  double weightTime = 0, backwardTime = 0;
  for (int64_t stage = 0; stage < stages; ++stage) {
    pipelineCosts.backwardByStage[stage] = backward[stage] + weight[stage];
    weightTime += weight[stage];
    backwardTime += backward[stage] + weight[stage];
  }
  if (backwardTime > 0 && weightTime > 0)
    pipelineCosts.weightShare = weightTime / backwardTime;
  std::optional<PipelineStreams> streams =
      buildSchedule(layout.schedule, shape, &error);
  if (!streams)
    return std::nullopt;
  std::optional<PipelineSimulation> simulation =
      simulateSchedule(*streams, shape, pipelineCosts, &error);
  if (!simulation)
    return std::nullopt;
  std::vector<double> busy(shape.ranks, 0);
  for (const TimedAction &action : simulation->timeline) {
    RankTime &time = result.ranks[action.rank];
    time.actionsEnd = std::max(time.actionsEnd, action.end);
    using Kind = PipelineAction::Kind;
    if (action.action.kind == Kind::Forward ||
        action.action.kind == Kind::Backward ||
        action.action.kind == Kind::WeightGradient)
      busy[action.rank] += action.end - action.start;
  }
  for (int64_t rank = 0; rank < shape.ranks; ++rank) {
    RankTime &time = result.ranks[rank];
    time.bubble = std::max(0.0, time.actionsEnd - busy[rank]);
    // Reductions that start as buckets fill hide behind the backward.
    double lastBackward = 0;
    for (int64_t chunk = 0; chunk < shape.chunks; ++chunk)
      lastBackward += pipelineCosts.backwardByStage[chunk * shape.ranks + rank];
    double unhidden = unhiddenSeconds(stepHideable[rank], lastBackward,
                                      cluster.device.communicationOverlap);
    for (const auto &[key, seconds] : stepHideableByKey[rank])
      if (unhidden > 0)
        time.exposed[key] += seconds / stepHideable[rank] * unhidden;
    time.stepEnd =
        time.actionsEnd + stepCompute[rank] + stepExposed[rank] + unhidden;
    result.seconds = std::max(result.seconds, time.stepEnd);
  }
  result.simulation = std::move(*simulation);
  return result;
}

} // namespace trellis::planner
