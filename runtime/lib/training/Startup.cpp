//===- Startup.cpp - trellis run before training --------------------------===//
//
// Joining a job an outside launcher started, the checks every rank would
// fail, and the launcher starting one process per rank.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Launcher.h"
#include "trellis/Runtime/OuterLaunch.h"

#include <cstdlib>

namespace trellis::runtime {

namespace {

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

StatusOr<std::unique_ptr<TcpStoreServer>>
joinOuterLaunch(TrainOptions &options) {
  if (options.rank >= 0)
    return std::unique_ptr<TcpStoreServer>();
  StatusOr<std::optional<OuterLaunch>> outer =
      detectOuterLaunch([](const char *name) { return std::getenv(name); });
  if (!outer.ok())
    return outer.status();
  if (!*outer)
    return std::unique_ptr<TcpStoreServer>();
  TRELLIS_RETURN_IF_ERROR(adoptOuterLaunch(**outer, options));
  return serveOuterLaunchStore(options);
}

StatusOr<InjectedFaults> checkRunOptions(const TrainOptions &options) {
  TRELLIS_RETURN_IF_ERROR(validateTrainOptions(options));
  StatusOr<InjectedFaults> faults = parseInjectedFaults(options);
  if (!faults.ok())
    return faults.status();
  // Before step 1, not after the run: the checkpoint's place is usable.
  if (!options.saveDir.empty() && options.rank <= 0)
    TRELLIS_RETURN_IF_ERROR(
        prepareCheckpointPath(options.saveDir, options.saveEvery > 0));
  if (StatusOr<const Backend *> backend = findBackend(options.device);
      !backend.ok())
    return backend.status();
  return faults;
}

StatusOr<std::optional<int>> launchRanksIfNeeded(const TrainOptions &options) {
  if (options.rank >= 0)
    return std::optional<int>();
  StatusOr<Plan> plan = loadPlanFile(options.planPath);
  if (!plan.ok())
    return plan.status();
  int64_t ranks = planMesh(*plan).size();
  if (ranks <= 1 && options.nproc <= 1 && options.nnodes <= 1)
    return std::optional<int>();
  int exitCode = launchRanks(options, planMesh(*plan));
  TRELLIS_RETURN_IF_ERROR(finishLaunchedTrace(options, exitCode, ranks));
  return std::optional<int>(exitCode);
}

} // namespace trellis::runtime
