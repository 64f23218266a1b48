//===- PipelineSchedule.h - Micro-batch schedules of a pipeline -*- C++ -*-===//
//
// A schedule is one instruction stream per pipeline rank: forwards and
// backwards of (micro-batch, model chunk), and the sends and receives
// between neighbouring virtual stages. Schedules are ordering rules over
// the same actions (GPipe, 1F1B, interleaved 1F1B); the checker proves a
// set of streams deadlock-free and complete by simulating them, and the
// simulator reports the bubble and the peak live activations per rank.
// Plain C++ (no exceptions thrown), shared by compiler and runtime.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_PIPELINESCHEDULE_H
#define TRELLIS_COMMON_PIPELINESCHEDULE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trellis {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZeroBubble };

/// `gpipe`, `1f1b`, `interleaved`, `zb-h1`.
std::optional<ScheduleKind> parseScheduleKind(const std::string &name);
const char *scheduleKindName(ScheduleKind kind);

struct PipelineAction {
  enum class Kind {
    Forward,
    /// The backward; with a weight-gradient action for the same
    /// micro-batch and chunk, only the part that makes the gradients of
    /// the stage's inputs (what the previous stage waits for).
    Backward,
    /// The rest of a split backward: the parameters' gradients, which no
    /// other stage waits for (zero-bubble schedules run them late).
    WeightGradient,
    /// Activations of a forward to the next virtual stage.
    SendActivation,
    RecvActivation,
    /// Gradients of a backward to the previous virtual stage.
    SendGradient,
    RecvGradient,
  };
  Kind kind = Kind::Forward;
  int64_t microBatch = 0;
  /// The model chunk on this rank (0 <= chunk < chunks).
  int64_t chunk = 0;

  bool operator==(const PipelineAction &other) const {
    return kind == other.kind && microBatch == other.microBatch &&
           chunk == other.chunk;
  }
  /// `F3`, `B3`, `W3`, `F3.c1` (chunk 1), `send F3`, `recv B3`...
  std::string toString() const;
};

/// p ranks, m micro-batches, v chunks per rank (virtual stage of chunk c on
/// rank s: c * p + s, so activations go around the ranks v times).
struct PipelineShape {
  int64_t ranks = 1;
  int64_t microBatches = 1;
  int64_t chunks = 1;
  int64_t virtualStages() const { return ranks * chunks; }
};

using PipelineStreams = std::vector<std::vector<PipelineAction>>;

/// Builds the streams of `kind` for `shape`, or sets `error` (m not a
/// multiple of p for interleaving, sizes < 1, chunks != 1 without
/// interleaving).
std::optional<PipelineStreams> buildSchedule(ScheduleKind kind,
                                             const PipelineShape &shape,
                                             std::string *error);

/// Durations for simulation; transfers take `transfer` each. `forward` and
/// `backward` are those of a whole rank (all its chunks) per micro-batch,
/// split evenly over chunks, unless per-stage durations are given.
struct PipelineCosts {
  double forward = 1.0;
  double backward = 2.0;
  double transfer = 0.0;
  /// Where a schedule splits backwards, the weight-gradient action takes
  /// this share of a backward's time and the backward the rest.
  double weightShare = 0.5;
  /// When not empty: one duration per virtual stage (chunk * ranks + rank),
  /// replacing `forward` and `backward` (stages of unequal cost).
  std::vector<double> forwardByStage;
  std::vector<double> backwardByStage;
};

struct TimedAction {
  int64_t rank = 0;
  PipelineAction action;
  double start = 0, end = 0;
};

struct PipelineSimulation {
  /// Every action in completion order, with its times.
  std::vector<TimedAction> timeline;
  double makespan = 0;
  /// Idle share of the ranks' time: 1 - busy / (ranks * makespan).
  double bubbleFraction = 0;
  /// Most (micro-batch, chunk) activations alive at once, per rank.
  std::vector<int64_t> peakLiveActivations;
  /// Most (micro-batch, chunk) pairs whose backward ran and whose weight
  /// gradient has not yet, at once, per rank (what a split backward keeps
  /// for its weight gradients); 0 without split backwards.
  std::vector<int64_t> peakPendingWeightGradients;
};

/// Simulates `streams` (each rank runs its stream in order; a receive waits
/// for its send; sends do not block). Fails with `error` naming the stuck
/// actions when the streams deadlock, and when they are incomplete (a send
/// without its receive, a micro-batch missing a forward or backward).
std::optional<PipelineSimulation>
simulateSchedule(const PipelineStreams &streams, const PipelineShape &shape,
                 const PipelineCosts &costs, std::string *error);

/// A Chrome trace (chrome://tracing, Perfetto): a row per rank, a slice per
/// forward, backward and transfer.
std::string chromeTrace(const PipelineSimulation &simulation);

} // namespace trellis

#endif // TRELLIS_COMMON_PIPELINESCHEDULE_H
