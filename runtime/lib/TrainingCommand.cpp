//===- TrainingCommand.cpp - trellis run's body ---------------------------===//
//
// Checks the options, starts the ranks (the launcher) or trains this one:
// a line per step, periodic and final checkpoints, the summary, the
// profile and the trace; fault injection for tests.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Trainer.h"

#include "trellis/Runtime/Launcher.h"
#include "trellis/Runtime/OuterLaunch.h"
#include "trellis/Runtime/Rendezvous.h"
#include "trellis/Runtime/Trace.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace trellis::runtime {

namespace {

/// "crash:R:S" / "hang:R:S" -> action, rank, step.
struct Fault {
  std::string action;
  int64_t rank = -1, step = -1;
};

StatusOr<Fault> parseFault(const std::string &text) {
  Fault fault;
  if (text.empty())
    return fault;
  size_t first = text.find(':'), second = text.rfind(':');
  if (first == std::string::npos || first == second)
    return Status::error("expected --inject-fault crash:RANK:STEP, "
                         "hang:RANK:STEP or overflow:RANK:STEP, found '" +
                         text + "'");
  fault.action = text.substr(0, first);
  fault.rank = std::atoll(text.substr(first + 1, second - first - 1).c_str());
  fault.step = std::atoll(text.substr(second + 1).c_str());
  if (fault.action != "crash" && fault.action != "hang" &&
      fault.action != "overflow")
    return Status::error("unknown fault '" + fault.action +
                         "': expected crash, hang or overflow");
  return fault;
}

/// --inject-save-fault POINT:STEP.
struct SaveFault {
  CheckpointFault fault;
  int64_t step = -1;
};

StatusOr<SaveFault> parseSaveFault(const std::string &text) {
  SaveFault parsed;
  if (text.empty())
    return parsed;
  size_t colon = text.rfind(':');
  std::string point = text.substr(0, colon);
  if (colon == std::string::npos ||
      (point != "model.safetensors" && point != "optimizer.safetensors" &&
       point != "commit"))
    return Status::error("expected --inject-save-fault model.safetensors:STEP, "
                         "optimizer.safetensors:STEP or commit:STEP, found '" +
                         text + "'");
  parsed.step = std::atoll(text.substr(colon + 1).c_str());
  if (point == "commit")
    parsed.fault.beforeCommit = true;
  else
    parsed.fault.afterFile = point;
  return parsed;
}

/// The store of a job an outside launcher started: the job's secret from
/// TRELLIS_JOB_TOKEN or --job-token-file (required: no launcher of ours
/// hands one out), exported for the communicator; rank 0 serves the store.
StatusOr<std::unique_ptr<TcpStoreServer>>
serveOuterLaunchStore(const TrainOptions &options) {
  const char *given = std::getenv(kJobTokenVariable);
  if ((!given || !*given) && options.jobTokenFile.empty())
    return Status::error(
        "started by " + options.outerLauncher +
        ": the ranks need the job's secret for their rendezvous store: set " +
        kJobTokenVariable + " to the same value for every rank (e.g. export " +
        kJobTokenVariable +
        "=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')) or give "
        "--job-token-file FILE");
  StatusOr<std::string> token = resolveJobToken(options);
  if (!token.ok())
    return token.status();
  setenv(kJobTokenVariable, token->c_str(), 1);
  if (options.rank != 0)
    return std::unique_ptr<TcpStoreServer>();
  StatusOr<std::unique_ptr<TcpStoreServer>> started =
      TcpStoreServer::start(options.masterAddr, options.masterPort, *token);
  if (!started.ok())
    return started.status().withContext(
        "serving the rendezvous store as rank 0 (--master-port chooses "
        "another port)");
  return started;
}

} // namespace

int runTrainingCommand(const TrainOptions &given) {
  using Clock = std::chrono::steady_clock;
  TrainOptions options = given;
  std::string prefix = "trellis run: error: ";
  auto fail = [&](const Status &status) {
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), status.message().c_str());
    return 1;
  };
  // A rank torchrun, mpirun or srun started: rank 0 serves the store.
  std::unique_ptr<TcpStoreServer> store;
  if (options.rank < 0) {
    StatusOr<std::optional<OuterLaunch>> outer =
        detectOuterLaunch([](const char *name) { return std::getenv(name); });
    if (!outer.ok())
      return fail(outer.status());
    if (*outer) {
      if (Status adopted = adoptOuterLaunch(**outer, options); !adopted.ok())
        return fail(adopted);
      StatusOr<std::unique_ptr<TcpStoreServer>> served =
          serveOuterLaunchStore(options);
      if (!served.ok())
        return fail(served.status());
      store = std::move(*served);
    }
  }
  if (options.rank >= 0)
    prefix = "trellis run: rank " + std::to_string(options.rank) + ": error: ";
  if (options.rank >= 0 && options.outerLauncher.empty())
    if (Status bound = bindRankToLauncher(); !bound.ok())
      return fail(bound);
  if (Status valid = validateTrainOptions(options); !valid.ok())
    return fail(valid);
  StatusOr<Fault> fault = parseFault(options.injectFault);
  if (!fault.ok())
    return fail(fault.status());
  StatusOr<SaveFault> saveFault = parseSaveFault(options.injectSaveFault);
  if (!saveFault.ok())
    return fail(saveFault.status());
  if (!options.saveDir.empty() && options.rank <= 0) {
    // Before step 1, not after the run: the checkpoint's place is usable.
    Status prepared =
        prepareCheckpointPath(options.saveDir, options.saveEvery > 0);
    if (!prepared.ok())
      return fail(prepared);
  }
  // Options every rank would reject: before starting any.
  if (StatusOr<const Backend *> backend = findBackend(options.device);
      !backend.ok())
    return fail(backend.status());
  if (options.rank < 0 && !options.tracePath.empty()) {
    // Fail before training, not after it, when the trace cannot be written.
    if (!std::ofstream(options.tracePath))
      return fail(
          Status::error("cannot write the trace '" + options.tracePath + "'"));
    // Only a finished run leaves a trace.
    std::remove(options.tracePath.c_str());
  }
  // The metrics file: written by rank 0 as the steps finish; node 0's
  // launcher fails before training, not after it, when it cannot be
  // written.
  std::ofstream metrics;
  if (!options.metricsPath.empty() &&
      (options.rank == 0 || (options.rank < 0 && options.nodeRank == 0))) {
    metrics.open(options.metricsPath,
                 options.loadDir.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics)
      return fail(Status::error("--metrics: cannot write '" +
                                options.metricsPath + "'"));
  }
  if (options.rank < 0) {
    // The launcher: start one process per rank if the plan needs several.
    StatusOr<Plan> plan = loadPlanFile(options.planPath);
    if (!plan.ok())
      return fail(plan.status());
    int64_t ranks = planMesh(*plan).size();
    if (ranks > 1 || options.nproc > 1 || options.nnodes > 1) {
      int exitCode = launchRanks(options, planMesh(*plan));
      // A failed run leaves no empty trace behind (the rank files stay).
      if (exitCode != 0 && !options.tracePath.empty())
        std::remove(options.tracePath.c_str());
      if (exitCode == 0 && !options.tracePath.empty() && options.nnodes == 1) {
        Status merged = mergeRankTraces(options.tracePath, ranks);
        if (!merged.ok())
          return fail(merged);
      }
      return exitCode;
    }
  }
  StatusOr<std::unique_ptr<Trainer>> created = Trainer::create(options);
  if (!created.ok())
    return fail(created.status());
  Trainer &trainer = **created;
  bool printing = trainer.rank() == 0;
  trainer.executor().setProfiling(options.profile);
  trainer.executor().setTracing(!options.tracePath.empty());
  trainer.executor().setStepRecording(options.cudaGraph);
  // Said once where a device that records steps cannot record this one
  // (known now, or when the recording fails).
  bool recordingSaid = false;
  auto sayRecordingObstacle = [&] {
    std::string obstacle = trainer.executor().stepRecordingObstacle();
    if (recordingSaid || !options.cudaGraph ||
        !trainer.executor().device().recordsSteps() || obstacle.empty() ||
        options.profile || !options.tracePath.empty())
      return;
    recordingSaid = true;
    std::fprintf(stderr,
                 "trellis run: rank %lld: steps run without a CUDA graph: "
                 "%s\n",
                 static_cast<long long>(trainer.rank()), obstacle.c_str());
  };
  sayRecordingObstacle();
  int64_t first = trainer.completedSteps();
  double totalSeconds = 0;
  int64_t timedSteps = 0;
  for (int64_t i = 0; i < options.steps; ++i) {
    if (fault->rank == trainer.rank() &&
        fault->step == trainer.completedSteps() + 1) {
      std::fflush(stdout);
      if (fault->action == "crash")
        std::raise(SIGKILL);
      if (fault->action == "overflow") {
        trainer.injectOverflow();
      } else {
        while (true)
          std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
    // Whether this step's update is dropped: --on-nonfinite skip, or an fp16
    // overflow (the loss scale counts those).
    int64_t overflowsBefore =
        trainer.lossScale() ? trainer.lossScale()->skippedSteps : 0;
    Clock::time_point start = Clock::now();
    Status status = trainer.step();
    double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    if (!status.ok())
      return fail(status);
    sayRecordingObstacle();
    // The first step warms caches and allocations: leave it out of the mean.
    if (i > 0 || options.steps == 1) {
      totalSeconds += seconds;
      ++timedSteps;
    }
    int64_t step = trainer.completedSteps();
    // The held-out loss: every --eval-every steps, and after the last.
    std::optional<double> evalLoss;
    if (trainer.evaluates() &&
        ((options.evalEvery > 0 && step % options.evalEvery == 0) ||
         i + 1 == options.steps)) {
      StatusOr<double> evaluated = trainer.evaluate(options.evalBatches);
      if (!evaluated.ok())
        return fail(evaluated.status());
      evalLoss = *evaluated;
    }
    if (printing && metrics.is_open()) {
      struct rusage now;
      getrusage(RUSAGE_SELF, &now);
      nlohmann::json record = {
          {"step", step},
          {"loss", trainer.lastLoss()},
          {"tokens_per_s", trainer.tokensPerStep() / seconds},
          {"step_ms", seconds * 1e3},
          {"skipped",
           !trainer.lastSkipReason().empty() ||
               (trainer.lossScale() &&
                trainer.lossScale()->skippedSteps > overflowsBefore)},
          {"peak_memory_mib", now.ru_maxrss / 1024.0}};
      if (std::optional<double> rate = trainer.lastLearningRate())
        record["lr"] = *rate;
      // A norm that is not finite (an overflowing fp16 step) is null.
      if (std::optional<double> norm = trainer.lastGradNorm())
        record["grad_norm"] =
            std::isfinite(*norm) ? nlohmann::json(*norm) : nlohmann::json();
      if (const DynamicLossScale *scale = trainer.lossScale()) {
        record["loss_scale"] = scale->scale;
        record["skipped_steps"] = scale->skippedSteps;
      }
      if (std::optional<double> balance = trainer.lastExpertImbalance()) {
        record["expert_load_max_over_mean"] = *balance;
        size_t experts =
            trainer.lastExpertLoad().size() / trainer.expertLoadLayers();
        nlohmann::json layers = nlohmann::json::array();
        for (int64_t layer = 0; layer < trainer.expertLoadLayers(); ++layer)
          layers.push_back(std::vector<float>(
              trainer.lastExpertLoad().begin() + layer * experts,
              trainer.lastExpertLoad().begin() + (layer + 1) * experts));
        record["expert_load"] = std::move(layers);
      }
      if (evalLoss)
        record["eval_loss"] = *evalLoss;
      metrics << record.dump() << "\n" << std::flush;
      if (!metrics)
        return fail(Status::error("--metrics: cannot write '" +
                                  options.metricsPath + "'"));
    }
    if (printing && (step % options.logEvery == 0 || i + 1 == options.steps)) {
      std::printf("step %lld | loss %.6f | %.0f tokens/s | %.1f ms",
                  static_cast<long long>(step), trainer.lastLoss(),
                  trainer.tokensPerStep() / seconds, seconds * 1e3);
      if (std::optional<double> rate = trainer.lastLearningRate())
        std::printf(" | lr %.6g", *rate);
      if (std::optional<double> norm = trainer.lastGradNorm())
        std::printf(std::isnan(*norm) ? " | grad norm nan"
                                      : " | grad norm %.6g",
                    *norm);
      if (const DynamicLossScale *scale = trainer.lossScale())
        std::printf(" | loss scale %g | skipped %lld", scale->scale,
                    static_cast<long long>(scale->skippedSteps));
      if (std::optional<double> balance = trainer.lastExpertImbalance())
        std::printf(" | expert load max/mean %.3f", *balance);
      std::printf("\n");
    }
    if (printing && evalLoss)
      std::printf("eval step %lld | loss %.6f | %lld batches\n",
                  static_cast<long long>(step), *evalLoss,
                  static_cast<long long>(options.evalBatches));
    if (printing && !trainer.lastSkipReason().empty()) {
      std::printf("step %lld skipped: %s\n", static_cast<long long>(step),
                  trainer.lastSkipReason().c_str());
    }
    std::fflush(stdout);
    if (options.saveEvery > 0 && step % options.saveEvery == 0) {
      Status saved = trainer.save(
          periodicCheckpointPath(options.saveDir, step),
          saveFault->step == step ? saveFault->fault : CheckpointFault());
      if (saved.ok() && printing && options.keep > 0)
        saved = pruneCheckpoints(options.saveDir, options.keep);
      if (!saved.ok())
        return fail(saved);
      if (printing)
        std::printf("saved checkpoint at step %lld to %s\n",
                    static_cast<long long>(step),
                    periodicCheckpointPath(options.saveDir, step).c_str());
    }
  }
  // A run of no steps evaluates the weights it started from.
  if (options.steps == 0 && trainer.evaluates()) {
    StatusOr<double> evaluated = trainer.evaluate(options.evalBatches);
    if (!evaluated.ok())
      return fail(evaluated.status());
    if (printing)
      std::printf("eval step %lld | loss %.6f | %lld batches\n",
                  static_cast<long long>(trainer.completedSteps()), *evaluated,
                  static_cast<long long>(options.evalBatches));
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  double meanMs = timedSteps ? totalSeconds / timedSteps * 1e3 : 0;
  if (printing && trainer.completedSteps() == first)
    std::printf("summary: no steps | buffers %.1f MiB (arena %.1f MiB) | "
                "peak memory %.1f MiB\n",
                trainer.executor().allocatedBytes() / 1048576.0,
                trainer.executor().arenaBytes() / 1048576.0,
                usage.ru_maxrss / 1024.0);
  else if (printing)
    std::printf(
        "summary: steps %lld-%lld | mean step %.2f ms | %.0f tokens/s | "
        "buffers %.1f MiB (arena %.1f MiB) | peak memory %.1f MiB\n",
        static_cast<long long>(first + 1),
        static_cast<long long>(trainer.completedSteps()), meanMs,
        meanMs > 0 ? trainer.tokensPerStep() / (meanMs / 1e3) : 0.0,
        trainer.executor().allocatedBytes() / 1048576.0,
        trainer.executor().arenaBytes() / 1048576.0,
        usage.ru_maxrss / 1024.0);
  // A warmup longer than the run: the rate never reached its peak.
  if (std::optional<LrSchedule> schedule =
          trainer.executor().plan().learningRateSchedule();
      printing && schedule && trainer.completedSteps() > first &&
      trainer.completedSteps() < schedule->warmupSteps)
    std::printf("note: the run ended in the learning rate's warmup (step "
                "%lld of %lld): the rate never reached its peak %g\n",
                static_cast<long long>(trainer.completedSteps()),
                static_cast<long long>(schedule->warmupSteps),
                schedule->peak);
  // A pipeline's stages hold different parts: each rank's memory.
  if (trainer.executor().plan().pipelineAxis) {
    StatusOr<std::vector<RankMemory>> memory =
        trainer.gatherMemory();
    if (!memory.ok())
      return fail(memory.status());
    const Plan &plan = trainer.executor().plan();
    for (size_t r = 0; printing && r < memory->size(); ++r)
      std::printf("memory: rank %zu (stage %lld) | buffers %.1f MiB (arena "
                  "%.1f MiB) | peak memory %.1f MiB | live micro-batches "
                  "%lld\n",
                  r, static_cast<long long>(stageOfRank(plan, r)),
                  (*memory)[r].buffersMiB, (*memory)[r].arenaMiB,
                  (*memory)[r].peakMiB,
                  static_cast<long long>(
                      plan.stages[stageOfRank(plan, r)].liveMicroBatches));
  }
  if (options.profile && printing) {
    double total = 0;
    std::vector<std::pair<double, std::string>> sorted;
    for (const auto &[op, entry] : trainer.executor().profile()) {
      total += entry.first;
      sorted.emplace_back(entry.first, op);
    }
    std::sort(sorted.rbegin(), sorted.rend());
    std::printf("profile: %.1f ms in kernels over %lld steps\n", total * 1e3,
                static_cast<long long>(options.steps));
    // Each op's achieved rate: its FLOPs per step over its time per step.
    std::map<std::string, double> flops = trainer.executor().stepFlops();
    for (const auto &[seconds, op] : sorted) {
      std::printf("  %-20s %9.2f ms  %5.1f%%", op.c_str(), seconds * 1e3,
                  total > 0 ? 100.0 * seconds / total : 0.0);
      auto counted = flops.find(op);
      if (counted != flops.end() && seconds > 0)
        std::printf("  %8.2f GFLOP/s", counted->second *
                                           static_cast<double>(options.steps) /
                                           seconds / 1e9);
      std::printf("\n");
    }
  }
  int64_t last = trainer.completedSteps();
  bool savedLast = options.saveEvery > 0 && last % options.saveEvery == 0 &&
                   options.steps > 0;
  if (!options.saveDir.empty() && !savedLast) {
    std::string dir = options.saveEvery > 0
                          ? periodicCheckpointPath(options.saveDir, last)
                          : options.saveDir;
    Status status = trainer.save(
        dir, saveFault->step == last ? saveFault->fault : CheckpointFault());
    if (status.ok() && printing && options.keep > 0)
      status = pruneCheckpoints(options.saveDir, options.keep);
    if (!status.ok())
      return fail(status);
    if (printing)
      std::printf("saved checkpoint at step %lld to %s\n",
                  static_cast<long long>(last), dir.c_str());
  }
  if (!options.tracePath.empty()) {
    // A launched rank leaves its file for the launcher to merge; a lone
    // process merges its own.
    int64_t rank = std::max<int64_t>(options.rank, 0);
    Status written = writeRankTrace(rankTracePath(options.tracePath, rank),
                                    rank, trainer.executor().trace());
    if (written.ok() && options.rank < 0)
      written = mergeRankTraces(options.tracePath, 1);
    if (!written.ok())
      return fail(written);
  }
  return 0;
}

} // namespace trellis::runtime
