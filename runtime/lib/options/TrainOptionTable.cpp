//===- TrainOptionTable.cpp - The options of trellis run ------------------===//

#include "trellis/Runtime/TrainOptionTable.h"

#include "trellis/Runtime/Backend.h"

#include <cstdint>

namespace trellis::runtime {

namespace {

constexpr const char *kTraining = "Training";
constexpr const char *kCheckpoints = "Checkpoints";
constexpr const char *kDevice = "Device and measurement";
constexpr const char *kLaunch = "Processes and rendezvous";
constexpr const char *kFaults = "Faults";
/// Set by the launcher, and for fault-injection tests: not in the help.
constexpr const char *kHidden = "";

constexpr unsigned kBoth = kOptionOnCommandLine | kOptionAsKey;

using O = TrainOptions;
using V = OptionValue;

V integer(int64_t value) {
  V v;
  v.integer = value;
  return v;
}
V number(double value) {
  V v;
  v.number = value;
  return v;
}
V text(const std::string &value) {
  V v;
  v.text = value;
  return v;
}
V flag(bool value) {
  V v;
  v.flag = value;
  return v;
}

/// An int option's value (out of int's range: the nearest end, which the
/// options' checks then refuse).
int clampToInt(int64_t value) {
  return value > INT32_MAX   ? INT32_MAX
         : value < INT32_MIN ? INT32_MIN
                             : int(value);
}

/// The largest --max-memory taken, in MiB (an exbibyte).
constexpr double kMaxMemoryMiB = 1e12;

std::string checkMaxMemory(const V &v) {
  if (v.number >= 0 && v.number <= kMaxMemoryMiB)
    return "";
  char found[32];
  std::snprintf(found, sizeof found, "%g", v.number);
  return std::string("expected --max-memory MiB >= 0, found ") + found;
}

std::string checkSeed(const V &v) {
  if (v.integer >= 0)
    return "";
  return "expected --seed >= 0, found " + std::to_string(v.integer);
}

/// "The backend that runs the plan:" and each registered backend's line.
const char *deviceHelp() {
  static const std::string help = [] {
    std::string text = "The backend that runs the plan:";
    for (const Backend *backend : registeredBackends())
      text += "\n  " + backend->name() + ": " + backend->description();
    return text;
  }();
  return help.c_str();
}

std::vector<OptionRow<O>> makeRows() {
  return {
      {"steps", OptionType::Int, [](O &o, const V &v) { o.steps = v.integer; },
       kTraining, "Training steps to run", "",
       [](const O &o) { return integer(o.steps); }},
      {"seed", OptionType::Int,
       [](O &o, const V &v) { o.seed = static_cast<uint64_t>(v.integer); },
       kTraining, "Seed of initialization and data", "",
       [](const O &o) { return integer(static_cast<int64_t>(o.seed)); },
       checkSeed, kBoth},
      {"data", OptionType::String, [](O &o, const V &v) { o.data = v.text; },
       kTraining,
       "synthetic (default), repeat (one batch, to overfit), a binary token "
       "file, a directory of them (shards, in name order), or a blend "
       "WEIGHT:PATH,WEIGHT:PATH"},
      {"eval-data", OptionType::String,
       [](O &o, const V &v) { o.evalData = v.text; }, kTraining,
       "Held-out tokens to evaluate on (a file, shards or a blend, as "
       "--data): the mean loss of its first --eval-batches batches, after "
       "the last step and every --eval-every steps"},
      {"eval-every", OptionType::Int,
       [](O &o, const V &v) { o.evalEvery = v.integer; }, kTraining,
       "Evaluate every N steps (0: after the last step only)", "",
       [](const O &o) { return integer(o.evalEvery); }},
      {"eval-batches", OptionType::Int,
       [](O &o, const V &v) { o.evalBatches = v.integer; }, kTraining,
       "Batches of --eval-data each evaluation reads", "",
       [](const O &o) { return integer(o.evalBatches); }},
      {"data-order", OptionType::String,
       [](O &o, const V &v) { o.dataOrder = v.text; }, kTraining,
       "random: windows at positions drawn from the seed; sequential: one "
       "window after another",
       "", [](const O &o) { return text(o.dataOrder); }},
      {"data-dtype", OptionType::String,
       [](O &o, const V &v) { o.dataDtype = v.text; }, kTraining,
       "Token file element type: uint16 or uint32", "",
       [](const O &o) { return text(o.dataDtype); }},
      {"save", OptionType::String, [](O &o, const V &v) { o.saveDir = v.text; },
       kCheckpoints,
       "Write a checkpoint into this directory at the end, committed as a "
       "whole (with --save-every: the directory of the step-N checkpoints)"},
      {"save-every", OptionType::Int,
       [](O &o, const V &v) { o.saveEvery = v.integer; }, kCheckpoints,
       "Also save every N steps, into DIR/step-N", "",
       [](const O &o) { return integer(o.saveEvery); }},
      {"keep", OptionType::Int, [](O &o, const V &v) { o.keep = v.integer; },
       kCheckpoints,
       "Keep the newest K periodic checkpoints (0: all); older ones are "
       "deleted once a new one is committed",
       "", [](const O &o) { return integer(o.keep); }},
      {"load", OptionType::String, [](O &o, const V &v) { o.loadDir = v.text; },
       kCheckpoints,
       "Resume from this checkpoint (or the newest step-N checkpoint in this "
       "directory)",
       "", nullptr, nullptr, kBoth},
      {"weights", OptionType::String,
       [](O &o, const V &v) { o.weightsPath = v.text; }, kTraining,
       "Initial weights: a Hugging Face .safetensors file", "", nullptr,
       nullptr, kBoth},
      {"device", OptionType::String,
       [](O &o, const V &v) { o.device = v.text; }, kDevice, deviceHelp(), "",
       [](const O &o) { return text(o.device); }, nullptr, kBoth},
      {"threads", OptionType::Int,
       [](O &o, const V &v) { o.threads = clampToInt(v.integer); }, kDevice,
       "Threads of the device's kernels (CPU: oneDNN's and the kernels' "
       "OpenMP threads)",
       "", [](const O &o) { return integer(o.threads); }, nullptr, kBoth},
      {"log-every", OptionType::Int,
       [](O &o, const V &v) { o.logEvery = v.integer; }, kTraining,
       "Print every N steps", "",
       [](const O &o) { return integer(o.logEvery); }},
      {"metrics", OptionType::String,
       [](O &o, const V &v) { o.metricsPath = v.text; }, kTraining,
       "Write one JSON record per step to FILE (JSON Lines: step, loss, lr, "
       "grad_norm, tokens_per_s, step_ms, loss_scale, skipped, eval_loss, "
       "peak_memory_mib; docs/Training.md); a run resumed with --load "
       "appends"},
      {"cuda-graph", OptionType::Bool,
       [](O &o, const V &v) { o.cudaGraph = v.flag; }, kDevice,
       "Record the second step as a CUDA graph and replay it at every later "
       "step (--device cuda; false: launch each kernel every step)",
       "", [](const O &o) { return flag(o.cudaGraph); }},
      {"profile", OptionType::Bool,
       [](O &o, const V &v) { o.profile = v.flag; }, kDevice,
       "Print the time spent per op kind", "", nullptr, nullptr,
       kOptionOnCommandLine, /*switchOnly=*/true},
      {"trace", OptionType::String,
       [](O &o, const V &v) { o.tracePath = v.text; }, kDevice,
       "Write the measured timeline (a row per rank for compute and one for "
       "communication) as a Chrome trace"},
      {"nproc", OptionType::Int, [](O &o, const V &v) { o.nproc = v.integer; },
       kLaunch, "Processes (ranks) to start on this node", "",
       [](const O &o) { return integer(o.nproc); }, nullptr, kBoth},
      {"nnodes", OptionType::Int,
       [](O &o, const V &v) { o.nnodes = v.integer; }, kLaunch,
       "Nodes taking part", "", [](const O &o) { return integer(o.nnodes); }},
      {"node-rank", OptionType::Int,
       [](O &o, const V &v) { o.nodeRank = v.integer; }, kLaunch,
       "This node's index", "", [](const O &o) { return integer(o.nodeRank); }},
      {"rendezvous", OptionType::String,
       [](O &o, const V &v) { o.rendezvousDir = v.text; }, kLaunch,
       "Directory the ranks meet in (shared by all nodes; default: a fresh "
       "temporary one)",
       "", nullptr, nullptr, kBoth},
      {"master-addr", OptionType::String,
       [](O &o, const V &v) { o.masterAddr = v.text; }, kLaunch,
       "Address of node 0, whose launcher serves the rendezvous store", "",
       [](const O &o) { return text(o.masterAddr); }, nullptr, kBoth},
      {"master-port", OptionType::Int,
       [](O &o, const V &v) { o.masterPort = clampToInt(v.integer); }, kLaunch,
       "Port of the rendezvous store on node 0 (0: a directory store)", "",
       [](const O &o) { return integer(o.masterPort); }, nullptr, kBoth},
      {"host", OptionType::String,
       [](O &o, const V &v) { o.hostname = v.text; }, kLaunch,
       "Address this node's ranks listen on", "",
       [](const O &o) { return text(o.hostname); }, nullptr, kBoth},
      {"timeout", OptionType::Double,
       [](O &o, const V &v) { o.timeoutSeconds = v.number; }, kLaunch,
       "Seconds a collective may wait before the rank fails (a dead or hung "
       "rank fails the job within this bound)",
       "", [](const O &o) { return number(o.timeoutSeconds); }, nullptr, kBoth},
      {"job-token-file", OptionType::String,
       [](O &o, const V &v) { o.jobTokenFile = v.text; }, kLaunch,
       "File whose first line is the job's secret for the TCP store (the "
       "same on every node; TRELLIS_JOB_TOKEN instead; without either, a "
       "single node makes one)",
       "", nullptr, nullptr, kBoth},
      {"max-memory", OptionType::Double,
       [](O &o, const V &v) {
         o.maxMemoryBytes = static_cast<int64_t>(v.number * 1048576.0);
       },
       kDevice,
       "MiB this rank may allocate (0: the memory available, shared by the "
       "node's ranks); a plan that needs more is refused before it "
       "allocates",
       "",
       [](const O &o) {
         return number(static_cast<double>(o.maxMemoryBytes) / 1048576.0);
       },
       checkMaxMemory, kBoth},
      {"on-nonfinite", OptionType::String,
       [](O &o, const V &v) { o.onNonfinite = v.text; }, kFaults,
       "A step whose loss or updated parameters are not finite: stop (name "
       "the step and the first such tensor; nothing of it is saved), skip "
       "(drop its update: updates are kept apart from the parameters, which "
       "costs their memory again), continue",
       "", [](const O &o) { return text(o.onNonfinite); }, nullptr, kBoth},
      {"rank", OptionType::Int, [](O &o, const V &v) { o.rank = v.integer; },
       kHidden, "Global rank of this process", "", nullptr, nullptr, kBoth},
      {"inject-fault", OptionType::String,
       [](O &o, const V &v) { o.injectFault = v.text; }, kHidden,
       "crash:RANK:STEP, hang:RANK:STEP or overflow:RANK:STEP"},
      {"inject-save-fault", OptionType::String,
       [](O &o, const V &v) { o.injectSaveFault = v.text; }, kHidden,
       "model.safetensors:STEP, optimizer.safetensors:STEP or commit:STEP: "
       "killed inside that save"},
  };
}

} // namespace

const std::vector<OptionRow<TrainOptions>> &trainOptionTable() {
  static const std::vector<OptionRow<TrainOptions>> rows = makeRows();
  return rows;
}

std::vector<OptionRow<TrainOptions>> trainOptionsIn(OptionScope scope) {
  std::vector<OptionRow<TrainOptions>> rows;
  for (const OptionRow<TrainOptions> &row : trainOptionTable())
    if (row.scopes & scope)
      rows.push_back(row);
  return rows;
}

} // namespace trellis::runtime
