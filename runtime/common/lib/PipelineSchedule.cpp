//===- PipelineSchedule.cpp - Micro-batch schedules of a pipeline ---------===//

#include "trellis/Common/PipelineSchedule.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <tuple>

namespace trellis {

std::optional<ScheduleKind> parseScheduleKind(const std::string &name) {
  if (name == "gpipe")
    return ScheduleKind::GPipe;
  if (name == "1f1b")
    return ScheduleKind::OneFOneB;
  if (name == "interleaved")
    return ScheduleKind::Interleaved;
  if (name == "zb-h1")
    return ScheduleKind::ZeroBubble;
  return std::nullopt;
}

const char *scheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved:
    return "interleaved";
  case ScheduleKind::ZeroBubble:
    return "zb-h1";
  }
  return "?";
}

std::string PipelineAction::toString() const {
  std::string prefix;
  std::string name;
  switch (kind) {
  case Kind::Forward:
    name = "F";
    break;
  case Kind::Backward:
    name = "B";
    break;
  case Kind::WeightGradient:
    name = "W";
    break;
  case Kind::SendActivation:
    prefix = "send ";
    name = "F";
    break;
  case Kind::RecvActivation:
    prefix = "recv ";
    name = "F";
    break;
  case Kind::SendGradient:
    prefix = "send ";
    name = "B";
    break;
  case Kind::RecvGradient:
    prefix = "recv ";
    name = "B";
    break;
  }
  std::string text = prefix + name + std::to_string(microBatch);
  if (chunk)
    text += ".c" + std::to_string(chunk);
  return text;
}

namespace {

using Kind = PipelineAction::Kind;

/// The compute actions (forward/backward) of one rank, in schedule order.
std::vector<PipelineAction>
computeOrder(ScheduleKind kind, const PipelineShape &shape, int64_t rank) {
  int64_t p = shape.ranks, m = shape.microBatches, v = shape.chunks;
  std::vector<PipelineAction> order;
  auto forward = [&](int64_t mb, int64_t chunk) {
    order.push_back({Kind::Forward, mb, chunk});
  };
  auto backward = [&](int64_t mb, int64_t chunk) {
    order.push_back({Kind::Backward, mb, chunk});
  };
  switch (kind) {
  case ScheduleKind::GPipe:
    // All forwards, then all backwards, both in micro-batch order (the
    // order gradients accumulate in, as in every other schedule).
    for (int64_t mb = 0; mb < m; ++mb)
      forward(mb, 0);
    for (int64_t mb = 0; mb < m; ++mb)
      backward(mb, 0);
    break;
  case ScheduleKind::OneFOneB: {
    // PipeDream-flush: p - rank - 1 warm-up forwards, then one forward and
    // one backward in turn, then the remaining backwards.
    int64_t warmup = std::min(p - rank - 1, m);
    for (int64_t mb = 0; mb < warmup; ++mb)
      forward(mb, 0);
    for (int64_t i = 0; i < m - warmup; ++i) {
      forward(warmup + i, 0);
      backward(i, 0);
    }
    for (int64_t mb = m - warmup; mb < m; ++mb)
      backward(mb, 0);
    break;
  }
  case ScheduleKind::ZeroBubble:
    break; // All ranks at once: zeroBubbleOrders.
  case ScheduleKind::Interleaved: {
    // Megatron's interleaved 1F1B: micro-batches go through a rank's chunks
    // in groups of p; backwards visit the chunks in reverse.
    int64_t total = m * v;
    auto microBatchOf = [&](int64_t k) { return (k / (p * v)) * p + k % p; };
    auto forwardChunk = [&](int64_t k) { return (k / p) % v; };
    auto backwardChunk = [&](int64_t k) { return v - 1 - (k / p) % v; };
    int64_t warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
    for (int64_t k = 0; k < warmup; ++k)
      forward(microBatchOf(k), forwardChunk(k));
    for (int64_t i = 0; i < total - warmup; ++i) {
      forward(microBatchOf(warmup + i), forwardChunk(warmup + i));
      backward(microBatchOf(i), backwardChunk(i));
    }
    for (int64_t k = total - warmup; k < total; ++k)
      backward(microBatchOf(k), backwardChunk(k));
    break;
  }
  }
  return order;
}

/// ZB-H1 (Qi et al., Zero Bubble Pipeline Parallelism): backwards split
/// into B (the gradients of the stage's inputs, which the previous stage
/// waits for) and W (the parameters' gradients, which nobody waits for).
/// The order is list scheduling at unit times (F = B = W): whenever a rank
/// is free it starts, of the actions whose inputs have arrived, a B first
/// (the critical path), else an F, else a pending W (filling what would be
/// a bubble); ranks act in time order. A rank starts a forward only while
/// fewer than p micro-batches are between their F and W: 1F1B's peak on
/// stage 0, now allowed on every stage. Everything runs in micro-batch
/// order, so gradients accumulate as in the other schedules.
std::vector<std::vector<PipelineAction>>
zeroBubbleOrders(const PipelineShape &shape) {
  int64_t p = shape.ranks, m = shape.microBatches;
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<PipelineAction>> orders(p);
  std::vector<int64_t> free(p, 0), nextForward(p, 0), nextBackward(p, 0),
      nextWeight(p, 0);
  // Finish times: forwards[rank][mb], backwards[rank][mb].
  std::vector<std::vector<int64_t>> forwards(p,
                                             std::vector<int64_t>(m, kNever));
  std::vector<std::vector<int64_t>> backwards = forwards;
  for (int64_t left = 3 * m * p; left > 0; --left) {
    // (start, priority, rank, kind) of the earliest action of any rank.
    std::tuple<int64_t, int, int64_t, Kind> best{kNever, 0, 0, Kind::Forward};
    for (int64_t rank = 0; rank < p; ++rank) {
      auto consider = [&](int64_t ready, int priority, Kind kind) {
        if (ready == kNever)
          return;
        std::tuple<int64_t, int, int64_t, Kind> option{
            std::max(free[rank], ready), priority, rank, kind};
        if (option < best)
          best = option;
      };
      int64_t mb = nextBackward[rank];
      if (mb < nextForward[rank])
        consider(rank == p - 1 ? forwards[rank][mb] : backwards[rank + 1][mb],
                 0, Kind::Backward);
      mb = nextForward[rank];
      if (mb < m && mb - nextWeight[rank] < p)
        consider(rank == 0 ? 0 : forwards[rank - 1][mb], 1, Kind::Forward);
      if (nextWeight[rank] < nextBackward[rank])
        consider(free[rank], 2, Kind::WeightGradient);
    }
    auto [start, priority, rank, kind] = best;
    int64_t &next = kind == Kind::Forward    ? nextForward[rank]
                    : kind == Kind::Backward ? nextBackward[rank]
                                             : nextWeight[rank];
    free[rank] = start + 1;
    if (kind == Kind::Forward)
      forwards[rank][next] = free[rank];
    if (kind == Kind::Backward)
      backwards[rank][next] = free[rank];
    orders[rank].push_back({kind, next++, 0});
  }
  return orders;
}

} // namespace

std::optional<PipelineStreams> buildSchedule(ScheduleKind kind,
                                             const PipelineShape &shape,
                                             std::string *error) {
  auto fail =
      [&](const std::string &message) -> std::optional<PipelineStreams> {
    if (error)
      *error = message;
    return std::nullopt;
  };
  if (shape.ranks < 1 || shape.microBatches < 1 || shape.chunks < 1)
    return fail("expected pipeline ranks, micro-batches and chunks >= 1, "
                "found " +
                std::to_string(shape.ranks) + ", " +
                std::to_string(shape.microBatches) + " and " +
                std::to_string(shape.chunks));
  if (kind != ScheduleKind::Interleaved && shape.chunks != 1)
    return fail(std::string("the ") + scheduleKindName(kind) +
                " schedule runs one chunk per rank, found " +
                std::to_string(shape.chunks) +
                " (use the interleaved schedule)");
  if (kind == ScheduleKind::Interleaved &&
      shape.microBatches % shape.ranks != 0)
    return fail("the interleaved schedule needs micro-batches (" +
                std::to_string(shape.microBatches) +
                ") to be a multiple of pipeline ranks (" +
                std::to_string(shape.ranks) + ")");

  int64_t p = shape.ranks, lastStage = shape.virtualStages() - 1;
  PipelineStreams streams(p);
  std::vector<std::vector<PipelineAction>> zeroBubble;
  if (kind == ScheduleKind::ZeroBubble)
    zeroBubble = zeroBubbleOrders(shape);
  for (int64_t rank = 0; rank < p; ++rank) {
    for (const PipelineAction &action : kind == ScheduleKind::ZeroBubble
                                            ? zeroBubble[rank]
                                            : computeOrder(kind, shape, rank)) {
      int64_t stage = action.chunk * p + rank;
      std::vector<PipelineAction> &stream = streams[rank];
      if (action.kind == Kind::WeightGradient) {
        stream.push_back(action);
        continue;
      }
      if (action.kind == Kind::Forward) {
        if (stage > 0)
          stream.push_back(
              {Kind::RecvActivation, action.microBatch, action.chunk});
        stream.push_back(action);
        if (stage < lastStage)
          stream.push_back(
              {Kind::SendActivation, action.microBatch, action.chunk});
      } else {
        if (stage < lastStage)
          stream.push_back(
              {Kind::RecvGradient, action.microBatch, action.chunk});
        stream.push_back(action);
        if (stage > 0)
          stream.push_back(
              {Kind::SendGradient, action.microBatch, action.chunk});
      }
    }
  }
  return streams;
}

std::optional<PipelineSimulation>
simulateSchedule(const PipelineStreams &streams, const PipelineShape &shape,
                 const PipelineCosts &costs, std::string *error) {
  auto fail =
      [&](const std::string &message) -> std::optional<PipelineSimulation> {
    if (error)
      *error = message;
    return std::nullopt;
  };
  int64_t p = shape.ranks, lastStage = shape.virtualStages() - 1;
  if (static_cast<int64_t>(streams.size()) != p)
    return fail("expected " + std::to_string(p) + " streams, found " +
                std::to_string(streams.size()));
  int64_t stages = shape.virtualStages();
  for (const std::vector<double> *byStage :
       {&costs.forwardByStage, &costs.backwardByStage})
    if (!byStage->empty() && static_cast<int64_t>(byStage->size()) != stages)
      return fail("expected " + std::to_string(stages) +
                  " per-stage durations, found " +
                  std::to_string(byStage->size()));
  auto forwardTimeOf = [&](int64_t stage) {
    return costs.forwardByStage.empty() ? costs.forward / shape.chunks
                                        : costs.forwardByStage[stage];
  };
  auto backwardTimeOf = [&](int64_t stage) {
    return costs.backwardByStage.empty() ? costs.backward / shape.chunks
                                         : costs.backwardByStage[stage];
  };

  // Flat tables over (micro-batch, virtual stage): schedules of thousands
  // of micro-batches on dozens of ranks are simulated for every plan the
  // planner prices.
  auto index = [&](int64_t microBatch, int64_t stage) {
    return static_cast<size_t>(microBatch * stages + stage);
  };
  size_t cells = static_cast<size_t>(shape.microBatches * stages);
  // Messages in flight to (micro-batch, receiving virtual stage): the time
  // they arrive, or -1.
  std::vector<double> activationsInFlight(cells, -1.0),
      gradientsInFlight(cells, -1.0);
  std::vector<char> forwardDone(cells, 0), backwardDone(cells, 0),
      weightDone(cells, 0);
  // (micro-batch, stage) whose backward is split: their weight gradients
  // take weightShare of the backward's time and free the activations.
  std::vector<char> split(cells, 0);
  bool anySplit = false;
  for (int64_t rank = 0; rank < p; ++rank)
    for (const PipelineAction &action : streams[rank])
      if (action.kind == Kind::WeightGradient && action.microBatch >= 0 &&
          action.microBatch < shape.microBatches && action.chunk >= 0 &&
          action.chunk < shape.chunks) {
        split[index(action.microBatch, action.chunk * p + rank)] = 1;
        anySplit = true;
      }
  std::vector<char> received(cells, 0), gradientReceived(cells, 0);

  PipelineSimulation simulation;
  simulation.peakLiveActivations.assign(p, 0);
  simulation.peakPendingWeightGradients.assign(p, 0);
  size_t actions = 0;
  for (const std::vector<PipelineAction> &stream : streams)
    actions += stream.size();
  simulation.timeline.reserve(actions);
  std::vector<size_t> next(p, 0);
  std::vector<double> free(p, 0.0), busy(p, 0.0);
  std::vector<int64_t> live(p, 0), pending(p, 0);

  auto stageOf = [&](int64_t rank, int64_t chunk) { return chunk * p + rank; };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t rank = 0; rank < p; ++rank) {
      while (next[rank] < streams[rank].size()) {
        const PipelineAction &action = streams[rank][next[rank]];
        if (action.chunk < 0 || action.chunk >= shape.chunks ||
            action.microBatch < 0 || action.microBatch >= shape.microBatches)
          return fail("rank " + std::to_string(rank) + ": " +
                      action.toString() + " is outside the schedule's " +
                      std::to_string(shape.microBatches) +
                      " micro-batches and " + std::to_string(shape.chunks) +
                      " chunks");
        int64_t stage = stageOf(rank, action.chunk);
        size_t key = index(action.microBatch, stage);
        TimedAction timed{rank, action, free[rank], free[rank]};
        bool blocked = false;
        switch (action.kind) {
        case Kind::RecvActivation:
        case Kind::RecvGradient: {
          bool gradient = action.kind == Kind::RecvGradient;
          double &arrival =
              (gradient ? gradientsInFlight : activationsInFlight)[key];
          if (arrival < 0) {
            blocked = true;
            break;
          }
          // The rank idles until the message arrives.
          timed.start = timed.end = std::max(free[rank], arrival);
          free[rank] = timed.end;
          arrival = -1;
          (gradient ? gradientReceived : received)[key] = 1;
          break;
        }
        case Kind::SendActivation:
        case Kind::SendGradient: {
          bool gradient = action.kind == Kind::SendGradient;
          int64_t to = gradient ? stage - 1 : stage + 1;
          if (to < 0 || to > lastStage)
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() + " has no stage to go to");
          timed.end = free[rank] + costs.transfer;
          (gradient ? gradientsInFlight
                    : activationsInFlight)[index(action.microBatch, to)] =
              timed.end;
          break;
        }
        case Kind::Forward:
          if (stage > 0 && !received[key])
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() +
                        " runs before its activations are received");
          if (forwardDone[key])
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() + " runs twice");
          timed.end = free[rank] + forwardTimeOf(stage);
          free[rank] = timed.end;
          busy[rank] += forwardTimeOf(stage);
          forwardDone[key] = 1;
          simulation.peakLiveActivations[rank] =
              std::max(simulation.peakLiveActivations[rank], ++live[rank]);
          break;
        case Kind::Backward: {
          if (!forwardDone[key])
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() + " runs before its forward");
          if (stage < lastStage && !gradientReceived[key])
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() +
                        " runs before its gradient is received");
          if (backwardDone[key])
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() + " runs twice");
          double duration =
              backwardTimeOf(stage) * (split[key] ? 1 - costs.weightShare : 1);
          timed.end = free[rank] + duration;
          free[rank] = timed.end;
          busy[rank] += duration;
          backwardDone[key] = 1;
          if (!split[key])
            --live[rank];
          else
            simulation.peakPendingWeightGradients[rank] = std::max(
                simulation.peakPendingWeightGradients[rank], ++pending[rank]);
          break;
        }
        case Kind::WeightGradient: {
          if (!backwardDone[key])
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() + " runs before its backward");
          if (weightDone[key])
            return fail("rank " + std::to_string(rank) + ": " +
                        action.toString() + " runs twice");
          double duration = backwardTimeOf(stage) * costs.weightShare;
          timed.end = free[rank] + duration;
          free[rank] = timed.end;
          busy[rank] += duration;
          weightDone[key] = 1;
          --live[rank];
          --pending[rank];
          break;
        }
        }
        if (blocked)
          break;
        simulation.timeline.push_back(timed);
        ++next[rank];
        progress = true;
      }
    }
  }

  // Deadlock: some rank still has actions, and every such rank waits for a
  // message no one will send.
  std::string stuck;
  for (int64_t rank = 0; rank < p; ++rank)
    if (next[rank] < streams[rank].size())
      stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") +
               std::to_string(rank) + " waits at " +
               streams[rank][next[rank]].toString();
  if (!stuck.empty())
    return fail("the schedule deadlocks: " + stuck);
  for (int64_t mb = 0; mb < shape.microBatches; ++mb)
    for (int64_t stage = 0; stage <= lastStage; ++stage)
      for (bool gradient : {false, true})
        if ((gradient ? gradientsInFlight
                      : activationsInFlight)[index(mb, stage)] >= 0)
          return fail("a message is never received: " +
                      std::string(gradient ? "gradient" : "activation") +
                      " of micro-batch " + std::to_string(mb) +
                      " for virtual stage " + std::to_string(stage));
  for (int64_t mb = 0; mb < shape.microBatches; ++mb)
    for (int64_t stage = 0; stage <= lastStage; ++stage) {
      size_t key = index(mb, stage);
      if (!forwardDone[key] || !backwardDone[key] ||
          (anySplit && !weightDone[key]))
        return fail("incomplete: micro-batch " + std::to_string(mb) +
                    " misses its " +
                    (!forwardDone[key]    ? "forward"
                     : !backwardDone[key] ? "backward"
                                          : "weight gradient") +
                    " at virtual stage " + std::to_string(stage));
    }

  for (double end : free)
    simulation.makespan = std::max(simulation.makespan, end);
  double totalBusy = 0;
  for (double b : busy)
    totalBusy += b;
  simulation.bubbleFraction = simulation.makespan > 0
                                  ? 1.0 - totalBusy / (p * simulation.makespan)
                                  : 0.0;
  return simulation;
}

std::string chromeTrace(const PipelineSimulation &simulation) {
  std::ostringstream os;
  os << "{\"traceEvents\": [";
  bool first = true;
  for (const TimedAction &timed : simulation.timeline) {
    bool compute = timed.action.kind == PipelineAction::Kind::Forward ||
                   timed.action.kind == PipelineAction::Kind::Backward ||
                   timed.action.kind == PipelineAction::Kind::WeightGradient;
    bool send = timed.action.kind == PipelineAction::Kind::SendActivation ||
                timed.action.kind == PipelineAction::Kind::SendGradient;
    if (!compute && !send)
      continue;
    os << (first ? "\n" : ",\n") << "  {\"name\": \"" << timed.action.toString()
       << "\", \"cat\": \"" << (compute ? "compute" : "transfer")
       << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": "
       << (compute ? timed.rank : 1000 + timed.rank)
       << ", \"ts\": " << timed.start * 1000.0
       << ", \"dur\": " << (timed.end - timed.start) * 1000.0 << "}";
    first = false;
  }
  // Row names: a compute row and a transfer row per rank.
  int64_t ranks = 0;
  for (const TimedAction &timed : simulation.timeline)
    ranks = std::max(ranks, timed.rank + 1);
  for (int64_t rank = 0; rank < ranks; ++rank) {
    os << (first ? "\n" : ",\n")
       << "  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": "
       << rank << ", \"args\": {\"name\": \"stage " << rank << "\"}},\n"
       << "  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": "
       << 1000 + rank << ", \"args\": {\"name\": \"stage " << rank
       << " sends\"}}";
    first = false;
  }
  os << "\n]}\n";
  return os.str();
}

} // namespace trellis
