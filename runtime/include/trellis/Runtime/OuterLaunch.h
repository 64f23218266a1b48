//===- OuterLaunch.h - Ranks started by torchrun, mpirun or srun -*- C++
//-*-===//
//
// A rank need not be started by `trellis run`'s own launcher: torchrun
// (`--no-python`), Open MPI's or MPICH's mpirun, and Slurm's srun each
// start one process per rank and tell it who it is through environment
// variables. This reads them, checks them, and turns them into the
// options of one rank: rank 0 serves the TCP rendezvous store, every rank
// presents the job's secret, and the usual agreement checks run.
//
// Which launcher: torchrun's and MPI's variables are set by the process
// that started this one, Slurm's may describe an outer allocation (srun
// starting torchrun agents, or mpirun's daemons), so torchrun and MPI win
// over Slurm; torchrun and MPI together must agree.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_OUTERLAUNCH_H
#define TRELLIS_RUNTIME_OUTERLAUNCH_H

#include "trellis/Runtime/Status.h"

#include <functional>
#include <optional>
#include <string>

namespace trellis::runtime {

struct TrainOptions;

/// Where an outside launcher put this process.
struct OuterLaunch {
  /// "torchrun", "Open MPI", "MPICH" or "Slurm".
  std::string launcher;
  int64_t rank = 0, worldSize = 1;
  int64_t localRank = 0, localWorldSize = 1;
  /// The rendezvous store's address and port when the launcher's
  /// variables give them (MASTER_ADDR / MASTER_PORT; Slurm: the first
  /// host of the step's node list).
  std::optional<std::string> storeHost;
  std::optional<int> storePort;
  /// torchrun's agent serves its own store on MASTER_PORT
  /// (TORCHELASTIC_USE_AGENT_STORE): ours takes the next port.
  bool storePortTaken = false;
};

/// Reads an environment variable (std::getenv, or a map in tests).
using EnvironmentLookup = std::function<const char *(const char *name)>;

/// The outside launcher that started this process, nullopt when none did
/// (or one started a job of a single rank), or an error naming the
/// variables that are missing, malformed or contradict each other.
StatusOr<std::optional<OuterLaunch>>
detectOuterLaunch(const EnvironmentLookup &environment);

/// The first host of a Slurm host list: "node[07-09,12],gpu1" ->
/// "node07"; nullopt when `list` is malformed.
std::optional<std::string> firstSlurmHost(const std::string &list);

/// The tasks on node `node` of a Slurm tasks-per-node list ("2(x3),1":
/// nodes 0-2 run 2, node 3 runs 1); nullopt when malformed or too short.
std::optional<int64_t> slurmTasksOnNode(const std::string &list, int64_t node);

/// Makes `options` those of `launch`'s rank: its rank and local rank, the
/// world size, the store (rank 0 serves it; --master-addr / --master-port
/// when given win over the launcher's), and this node's address for the
/// communicator when the job spans several nodes. Fails, saying why, when
/// the command also asks to start ranks itself (--nproc, --nnodes) or no
/// store address is known.
Status adoptOuterLaunch(const OuterLaunch &launch, TrainOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_OUTERLAUNCH_H
