//===- TrainOptions.h - What trellis run is asked to do ---------*- C++ -*-===//
//
// The options of a training run (trellis-run's flags, and what the
// launcher hands each rank), and the checks they pass before anything
// starts: every number in its range, every path of the kind it must be,
// every address resolvable.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_TRAINOPTIONS_H
#define TRELLIS_RUNTIME_TRAINOPTIONS_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::runtime {

struct TrainOptions {
  std::string planPath;
  int64_t steps = 10;
  uint64_t seed = 0;
  /// "synthetic", "repeat" (one batch again and again), a token file, a
  /// directory of token files, or a blend "W:PATH,W:PATH" of those
  /// (TokenSource.h).
  std::string data = "synthetic";
  /// The caller passes each step's batch (Trainer::step(tokens, targets):
  /// the C API's sessions); `data` is then unused.
  bool callerBatches = false;
  /// Element type of a token file: uint16 or uint32.
  std::string dataDtype = "uint16";
  /// How windows are taken from token data: "random" or "sequential"
  /// (TokenSource.h).
  std::string dataOrder = "random";
  /// Directory to write a checkpoint into after the last step ("" = none);
  /// with saveEvery, the root of the periodic checkpoints (Checkpoint.h).
  std::string saveDir;
  /// Save every this many steps into saveDir/step-N (0: at the end only).
  int64_t saveEvery = 0;
  /// Keep the newest this many periodic checkpoints (0: all).
  int64_t keep = 0;
  /// Directory of a checkpoint to resume from ("" = none).
  std::string loadDir;
  /// A Hugging Face .safetensors file to take initial weights from.
  std::string weightsPath;
  /// The backend that runs the plan ("cpu").
  std::string device = "cpu";
  /// Threads of the device's kernels (CPU: OpenBLAS threads).
  int threads = 1;
  /// Bytes this rank may allocate (--max-memory, in MiB on the command
  /// line; 0: what the machine has available).
  int64_t maxMemoryBytes = 0;
  /// What a step whose loss or updates are not finite does: stop the run
  /// naming the step and the tensor, skip its update, or continue.
  std::string onNonfinite = "stop";
  /// Print a line every this many steps (the last step always prints).
  int64_t logEvery = 1;
  /// Held-out token data to evaluate on ("" = none), as `data` (files,
  /// shards, blends): its first evalBatches batches, windows one after
  /// another, the same every time. Evaluated every evalEvery steps (0:
  /// only after the last step).
  std::string evalData;
  int64_t evalEvery = 0;
  int64_t evalBatches = 8;
  /// Write one JSON record per step here, JSON Lines ("" = none): step,
  /// loss, tokens/s, step time, peak memory, and the learning rate, grad
  /// norm and loss scale when the plan has them. A resumed run (loadDir)
  /// appends; a fresh one starts the file anew.
  std::string metricsPath;
  /// Record the step once and replay it (a CUDA graph) where the device
  /// records steps (Executor::setStepRecording).
  bool cudaGraph = true;
  /// Print the time spent per op kind after the run.
  bool profile = false;
  /// Write the measured timeline of every rank here as one Chrome trace
  /// ("" = none). With several nodes, each rank keeps its own
  /// `<path>.rank<N>` file instead.
  std::string tracePath;

  // Distributed runs (torchrun-like). The launcher (rank < 0) starts
  // `nproc` processes on this node, each re-running the same command with
  // --rank; ranks find each other through files in `rendezvousDir`.
  /// Processes per node; the plan's mesh size must equal nproc * nnodes.
  int64_t nproc = 1;
  int64_t nnodes = 1;
  int64_t nodeRank = 0;
  /// This process's global rank, or -1 in the launcher.
  int64_t rank = -1;
  /// Set for a rank an outside launcher started (OuterLaunch.h): its name
  /// ("torchrun", "Open MPI", "MPICH", "Slurm"), the ranks of the job, this
  /// rank's index on its node and the ranks there. Otherwise "", 0, -1, 0:
  /// --nproc × --nnodes ranks, rank % --nproc, --nproc.
  std::string outerLauncher;
  int64_t worldSize = 0;
  int64_t localRank = -1;
  int64_t ranksOnNode = 0;
  /// Shared directory for the rendezvous ("" = a fresh temporary one; with
  /// several nodes it must be on a filesystem they share).
  std::string rendezvousDir;
  /// Address this node's ranks listen on.
  std::string hostname = "127.0.0.1";
  /// The rendezvous store of node 0's launcher (torchrun's MASTER_ADDR and
  /// MASTER_PORT); a port of 0 means the file store in rendezvousDir.
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;
  /// Bound on connecting and on every collective; a rank that dies or hangs
  /// fails the others within it.
  double timeoutSeconds = 60;
  /// A file whose first line is the job's secret for the TCP store
  /// (TRELLIS_JOB_TOKEN wins over it; "" with neither: node 0 makes one).
  std::string jobTokenFile;
  /// The command line to re-run in each rank (argv of the launcher).
  std::vector<std::string> command;
  /// Fault injection for tests: "crash:R:S" makes rank R kill itself with
  /// SIGKILL before step S; "hang:R:S" makes it stop responding there.
  std::string injectFault;
  /// Fault injection for tests: "POINT:S" kills the writing rank inside
  /// the save after step S: after writing model.safetensors or
  /// optimizer.safetensors, or at "commit" (before the rename).
  std::string injectSaveFault;
};

/// The first option that cannot work, as "--flag: expected ..., found
/// ..."; success when all can. Checks ranges (steps, threads, ports,
/// timeout, counts), enumerations (data dtype, --on-nonfinite), the kinds
/// of the paths read (plan, weights, token file: regular files; the
/// rendezvous: a directory) and that --master-addr and --host resolve.
/// Looks at no plan and starts nothing.
Status validateTrainOptions(const TrainOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TRAINOPTIONS_H
