//===- OuterLaunch.cpp - Ranks started by torchrun, mpirun or srun --------===//

#include "trellis/Runtime/OuterLaunch.h"

#include "trellis/Runtime/TrainOptions.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

namespace trellis::runtime {

namespace {

/// Port the store takes when no variable or option names one (torch's
/// default MASTER_PORT).
constexpr int kDefaultStorePort = 29500;

/// One launcher's variables: rank, world size, local rank, local world
/// size (the last two may be absent for Slurm).
struct LauncherVariables {
  const char *launcher;
  const char *rank, *worldSize, *localRank, *localWorldSize;
};

constexpr LauncherVariables kTorchrun{"torchrun", "RANK", "WORLD_SIZE",
                                      "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr LauncherVariables kOpenMpi{
    "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr LauncherVariables kMpich{"MPICH", "PMI_RANK", "PMI_SIZE",
                                   "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
constexpr LauncherVariables kSlurm{"Slurm", "SLURM_PROCID", "SLURM_NTASKS",
                                   "SLURM_LOCALID", nullptr};

/// A whole decimal integer in [low, high], or nullopt.
std::optional<int64_t> parseInteger(const char *text, int64_t low,
                                    int64_t high) {
  if (!text || !*text)
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < low || value > high)
    return std::nullopt;
  return value;
}

/// `NAME=value`, or `NAME unset`, for messages.
std::string shown(const EnvironmentLookup &environment, const char *name) {
  const char *value = environment(name);
  return value ? std::string(name) + "=" + value : std::string(name) + " unset";
}

/// The launcher's variables, when its rank variable is set.
StatusOr<std::optional<OuterLaunch>>
readLauncher(const EnvironmentLookup &environment,
             const LauncherVariables &names) {
  if (!environment(names.rank))
    return std::optional<OuterLaunch>();
  auto malformed = [&](const std::string &what) {
    return Status::error(
        std::string("started by ") + names.launcher + ", expected " + what +
        ", found " + shown(environment, names.rank) + ", " +
        shown(environment, names.worldSize) + ", " +
        shown(environment, names.localRank) +
        (names.localWorldSize ? ", " + shown(environment, names.localWorldSize)
                              : std::string()));
  };
  constexpr int64_t kMaxRanks = int64_t(1) << 24;
  OuterLaunch launch;
  launch.launcher = names.launcher;
  std::optional<int64_t> world =
      parseInteger(environment(names.worldSize), 1, kMaxRanks);
  if (!world)
    return malformed(std::string(names.worldSize) + " a count of ranks >= 1");
  std::optional<int64_t> rank =
      parseInteger(environment(names.rank), 0, kMaxRanks);
  if (!rank || *rank >= *world)
    return malformed(std::string(names.rank) + " in [0, " + names.worldSize +
                     ")");
  launch.rank = *rank;
  launch.worldSize = *world;
  std::optional<int64_t> localRank =
      parseInteger(environment(names.localRank), 0, kMaxRanks);
  if (!localRank)
    return malformed(std::string(names.localRank) + " a rank >= 0");
  launch.localRank = *localRank;
  if (names.localWorldSize) {
    std::optional<int64_t> localWorld =
        parseInteger(environment(names.localWorldSize), 1, kMaxRanks);
    if (!localWorld || *localRank >= *localWorld || *localWorld > *world)
      return malformed(std::string(names.localRank) + " in [0, " +
                       names.localWorldSize + ") and " + names.localWorldSize +
                       " <= " + names.worldSize);
    launch.localWorldSize = *localWorld;
  }
  return std::optional<OuterLaunch>(launch);
}

/// MASTER_ADDR and MASTER_PORT, when set (torchrun's, or the user's for
/// mpirun and srun).
Status readStoreVariables(const EnvironmentLookup &environment,
                          OuterLaunch &launch) {
  if (const char *host = environment("MASTER_ADDR"); host && *host)
    launch.storeHost = host;
  if (const char *port = environment("MASTER_PORT")) {
    std::optional<int64_t> value = parseInteger(port, 1, 65535);
    if (!value)
      return Status::error("started by " + launch.launcher +
                           ", expected MASTER_PORT in [1, 65535], found '" +
                           port + "'");
    launch.storePort = static_cast<int>(*value);
  }
  return Status::success();
}

/// Slurm's node facts: the tasks on this node, and the first host of the
/// step's nodes when MASTER_ADDR does not name the store.
Status readSlurmNodes(const EnvironmentLookup &environment,
                      OuterLaunch &launch) {
  const char *nodeId = environment("SLURM_NODEID");
  std::optional<int64_t> node = parseInteger(nodeId, 0, INT32_MAX);
  if (!node)
    return Status::error("started by Slurm, expected SLURM_NODEID a node "
                         "index >= 0, found " +
                         shown(environment, "SLURM_NODEID"));
  const char *tasks = environment("SLURM_STEP_TASKS_PER_NODE");
  if (!tasks)
    tasks = environment("SLURM_TASKS_PER_NODE");
  if (tasks) {
    std::optional<int64_t> onNode = slurmTasksOnNode(tasks, *node);
    if (!onNode || launch.localRank >= *onNode)
      return Status::error("started by Slurm, expected the tasks per node '" +
                           std::string(tasks) + "' to give node " +
                           std::to_string(*node) + " more than SLURM_LOCALID " +
                           std::to_string(launch.localRank) + " tasks");
    launch.localWorldSize = *onNode;
  } else {
    launch.localWorldSize = launch.worldSize;
  }
  if (!launch.storeHost) {
    const char *nodes = environment("SLURM_STEP_NODELIST");
    if (!nodes)
      nodes = environment("SLURM_JOB_NODELIST");
    if (nodes) {
      std::optional<std::string> first = firstSlurmHost(nodes);
      if (!first)
        return Status::error("started by Slurm, cannot read the node list '" +
                             std::string(nodes) + "'");
      launch.storeHost = *first;
    }
  }
  return Status::success();
}

} // namespace

std::optional<std::string> firstSlurmHost(const std::string &list) {
  // The first entry: up to a comma outside brackets.
  std::string entry;
  int depth = 0;
  for (char c : list) {
    if (c == '[')
      ++depth;
    else if (c == ']')
      --depth;
    if (depth < 0 || depth > 1)
      return std::nullopt;
    if (c == ',' && depth == 0)
      break;
    entry += c;
  }
  if (depth != 0 || entry.empty())
    return std::nullopt;
  // Each bracket stands for its first number.
  std::string host;
  for (size_t i = 0; i < entry.size(); ++i) {
    if (entry[i] != '[') {
      host += entry[i];
      continue;
    }
    size_t close = entry.find(']', i);
    std::string first = entry.substr(i + 1, close - i - 1);
    first = first.substr(0, first.find_first_of(",-"));
    if (first.empty() ||
        first.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    host += first;
    i = close;
  }
  return host;
}

std::optional<int64_t> slurmTasksOnNode(const std::string &list, int64_t node) {
  // Entries "N" or "N(xR)": N tasks on each of R nodes.
  size_t at = 0;
  int64_t nodesBefore = 0;
  while (at < list.size()) {
    size_t comma = list.find(',', at);
    std::string entry = list.substr(
        at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? list.size() : comma + 1;
    std::string count = entry, repeat = "1";
    if (size_t open = entry.find("(x"); open != std::string::npos) {
      if (entry.back() != ')')
        return std::nullopt;
      count = entry.substr(0, open);
      repeat = entry.substr(open + 2, entry.size() - open - 3);
    }
    std::optional<int64_t> tasks = parseInteger(count.c_str(), 1, INT32_MAX);
    std::optional<int64_t> nodes = parseInteger(repeat.c_str(), 1, INT32_MAX);
    if (!tasks || !nodes)
      return std::nullopt;
    if (node < nodesBefore + *nodes)
      return tasks;
    nodesBefore += *nodes;
  }
  return std::nullopt;
}

StatusOr<std::optional<OuterLaunch>>
detectOuterLaunch(const EnvironmentLookup &environment) {
  StatusOr<std::optional<OuterLaunch>> torchrun =
      readLauncher(environment, kTorchrun);
  if (!torchrun.ok())
    return torchrun.status();
  std::optional<OuterLaunch> mpi;
  for (const LauncherVariables &names : {kOpenMpi, kMpich}) {
    StatusOr<std::optional<OuterLaunch>> read =
        readLauncher(environment, names);
    if (!read.ok())
      return read.status();
    if (*read && !mpi)
      mpi = *read;
  }
  if (*torchrun && mpi &&
      ((*torchrun)->rank != mpi->rank ||
       (*torchrun)->worldSize != mpi->worldSize))
    return Status::error(
        "torchrun's and " + mpi->launcher + "'s variables disagree: rank " +
        std::to_string((*torchrun)->rank) + " of " +
        std::to_string((*torchrun)->worldSize) + " against rank " +
        std::to_string(mpi->rank) + " of " + std::to_string(mpi->worldSize) +
        "; start each rank with one launcher");
  std::optional<OuterLaunch> launch = *torchrun ? *torchrun : mpi;
  if (launch && launch->launcher == "torchrun") {
    TRELLIS_RETURN_IF_ERROR(readStoreVariables(environment, *launch));
    if (!launch->storeHost || !launch->storePort)
      return Status::error(
          "started by torchrun, expected MASTER_ADDR and MASTER_PORT (the "
          "store's address), found " +
          shown(environment, "MASTER_ADDR") + ", " +
          shown(environment, "MASTER_PORT"));
    const char *agentStore = environment("TORCHELASTIC_USE_AGENT_STORE");
    launch->storePortTaken = agentStore && std::string(agentStore) == "True";
  } else if (launch) {
    TRELLIS_RETURN_IF_ERROR(readStoreVariables(environment, *launch));
  } else {
    StatusOr<std::optional<OuterLaunch>> slurm =
        readLauncher(environment, kSlurm);
    if (!slurm.ok())
      return slurm.status();
    launch = *slurm;
    if (launch) {
      TRELLIS_RETURN_IF_ERROR(readStoreVariables(environment, *launch));
      TRELLIS_RETURN_IF_ERROR(readSlurmNodes(environment, *launch));
    }
  }
  // A job of one rank is this process alone: trellis run's own launcher
  // may still start the ranks its plan needs.
  if (!launch || launch->worldSize == 1)
    return std::optional<OuterLaunch>();
  return launch;
}

Status adoptOuterLaunch(const OuterLaunch &launch, TrainOptions &options) {
  std::string started = "started by " + launch.launcher + " as rank " +
                        std::to_string(launch.rank) + " of " +
                        std::to_string(launch.worldSize);
  if (options.nproc != 1 || options.nnodes != 1 || options.nodeRank != 0)
    return Status::error(started +
                         ": --nproc, --nnodes and --node-rank start ranks "
                         "with trellis run's own launcher; drop them");
  if (!options.rendezvousDir.empty())
    return Status::error(started +
                         ": ranks meet through the TCP store rank 0 serves, "
                         "not --rendezvous; drop it");
  bool severalNodes = launch.localWorldSize < launch.worldSize;
  TrainOptions defaults;
  if (options.masterAddr == defaults.masterAddr) {
    if (launch.storeHost)
      options.masterAddr = *launch.storeHost;
    else if (severalNodes)
      return Status::error(started + " over several nodes: expected the "
                                     "store's address (rank 0's node) in "
                                     "MASTER_ADDR or --master-addr");
  }
  if (options.masterPort == 0)
    options.masterPort =
        launch.storePort ? *launch.storePort + (launch.storePortTaken ? 1 : 0)
                         : kDefaultStorePort;
  if (options.masterPort > 65535)
    return Status::error(started + ": the store's port " +
                         std::to_string(options.masterPort) +
                         " is out of range; give --master-port");
  // Peers on other nodes reach this rank by its host's name.
  if (severalNodes && options.hostname == defaults.hostname) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0)
      return Status::error(started + ": cannot read this host's name; give "
                                     "--host ADDRESS");
    options.hostname = name;
  }
  options.rank = launch.rank;
  options.worldSize = launch.worldSize;
  options.localRank = launch.localRank;
  options.ranksOnNode = launch.localWorldSize;
  options.outerLauncher = launch.launcher;
  return Status::success();
}

} // namespace trellis::runtime
