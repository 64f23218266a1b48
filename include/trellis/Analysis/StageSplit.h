//===- StageSplit.h - Model layers split into pipeline stages -*- C++ -*-===//
//
// A pipeline stage holds a contiguous run of layers; the first stage also
// holds the embedding and the last the head and loss. The balancer picks
// the split with the smallest slowest stage and, among the splits within a
// small tolerance of that time, the one with the smallest largest memory.
// Plain C++ (no exceptions thrown), used by the compiler: the stage
// balancer, the pipeline cost and `trellis schedule`.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_ANALYSIS_STAGESPLIT_H
#define TRELLIS_ANALYSIS_STAGESPLIT_H

#include "trellis/Common/PipelineSchedule.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trellis {

/// Estimated cost of one part of the model (a layer, the embedding, the
/// head): compute time of its forward and backward, and the memory it pins
/// on its stage (weights, gradients, optimizer state, saved activations).
struct PartCost {
  double time = 0;
  double memory = 0;

  PartCost &operator+=(const PartCost &other) {
    time += other.time;
    memory += other.memory;
    return *this;
  }
};

/// A model as the stage balancer sees it.
struct StagedModelCost {
  /// On the first stage.
  PartCost embedding;
  /// One per layer, in order.
  std::vector<PartCost> layers;
  /// On the last stage.
  PartCost head;
};

/// Layers per stage, in stage order; they sum to the number of layers.
using StageLayers = std::vector<int64_t>;

/// Splits `model` into `stages` contiguous stages of at least one layer
/// each. Fails with `error` when there are fewer layers than stages or
/// fewer than one stage.
std::optional<StageLayers> balanceStages(const StagedModelCost &model,
                                         int64_t stages, std::string *error);

/// Checks a user-given split (`--pp-layers 6,7,7,6`): one entry per stage,
/// each at least 1, summing to the number of layers. Fails with `error`
/// saying what was expected and found.
bool verifyStageLayers(const StageLayers &split, int64_t numLayers,
                       int64_t stages, std::string *error);

/// Parses `6,7,7,6`; fails with `error` on anything but positive integers
/// separated by commas.
std::optional<StageLayers> parseStageLayers(const std::string &text,
                                            std::string *error);

/// Improves `split` for a schedule: moves one layer at a time across a
/// stage boundary, keeping the move that shortens the simulated makespan
/// most, until none does. Balancing stages one by one can leave a rank's
/// chunks unevenly loaded when they interleave; the simulation sees it.
/// `forwardShare` of a stage's time is its forward, the rest its backward.
/// Preconditions: `split` verified against `model` for the schedule's
/// virtual stages, and `streams` built for `shape`.
StageLayers refineStagesBySimulation(const StagedModelCost &model,
                                     StageLayers split,
                                     const PipelineStreams &streams,
                                     const PipelineShape &shape,
                                     double forwardShare);

/// The split a pipeline runs: `given` (`--pp-layers` text) parsed and
/// verified when not empty, else balanced and then refined by simulating
/// `streams`. Fails with `error` (prefixed `--pp-layers: ` for a given
/// split).
std::optional<StageLayers>
chooseStageLayers(const StagedModelCost &model, const std::string &given,
                  const PipelineStreams &streams, const PipelineShape &shape,
                  double forwardShare, std::string *error);

/// The cost of each stage of `split` (embedding on the first, head on the
/// last). Precondition: `split` verified against `model`.
std::vector<PartCost> stageCosts(const StagedModelCost &model,
                                 const StageLayers &split);

} // namespace trellis

#endif // TRELLIS_ANALYSIS_STAGESPLIT_H
