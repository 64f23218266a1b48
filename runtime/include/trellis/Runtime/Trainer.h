//===- Trainer.h - Training loop over a plan --------------------*- C++ -*-===//
//
// Steps a training plan: feeds batches, runs the program, applies the
// updates, saves and restores checkpoints; runTrainingCommand is
// trellis-run's body. This header is free of third-party types.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_TRAINER_H
#define TRELLIS_RUNTIME_TRAINER_H

#include "trellis/Runtime/Checkpoint.h"
#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Safetensors.h"
#include "trellis/Runtime/ShardLayout.h"
#include "trellis/Runtime/Status.h"

#include <memory>
#include <string>
#include <vector>

namespace trellis::runtime {

class TokenSource;

struct TrainOptions {
  std::string planPath;
  int64_t steps = 10;
  uint64_t seed = 0;
  /// "synthetic", "repeat" (one batch again and again), or a token file.
  std::string data = "synthetic";
  /// Element type of a token file: uint16 or uint32.
  std::string dataDtype = "uint16";
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
  /// Print a line every this many steps (the last step always prints).
  int64_t logEvery = 1;
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

/// fp16's dynamic loss scaling: the loss is multiplied by `scale` before
/// the backward; a step whose updates are not finite on some rank is
/// skipped on every rank and halves the scale; 2000 clean steps in a row
/// double it.
struct DynamicLossScale {
  static constexpr int64_t kGrowthInterval = 2000;
  double scale = 65536;
  int64_t cleanSteps = 0;
  int64_t skippedSteps = 0;

  /// Updates the scale after a step whose updates were `finite`.
  void record(bool finite);
};

/// One rank's memory, in MiB.
struct RankMemory {
  double buffersMiB = 0, arenaMiB = 0, peakMiB = 0;
};

class Trainer {
public:
  ~Trainer();

  /// Builds a trainer for `options` (reads the plan, opens the data,
  /// initializes or loads the state).
  static StatusOr<std::unique_ptr<Trainer>> create(const TrainOptions &options);

  /// Runs one training step; the loss is then `lastLoss()`.
  Status step();

  int64_t completedSteps() const { return completedSteps_; }
  /// This process's rank (0 without a communicator).
  int64_t rank() const;
  /// The loss of the last step (0 before the first).
  float lastLoss() const { return lastLoss_; }
  /// The dynamic loss scale, for plans that scale their loss (fp16).
  const DynamicLossScale *lossScale() const {
    return lossScaleArg_ >= 0 ? &lossScale_ : nullptr;
  }
  /// Testing (--inject-fault overflow:R:S): the next step's loss scale is
  /// infinite on this rank, so its gradients overflow.
  void injectOverflow() { overflowNextStep_ = true; }
  Executor &executor() { return *executor_; }
  /// Tokens of the global batch (all data-parallel shards).
  int64_t tokensPerStep() const { return batch_ * seq_; }

  /// Writes model.safetensors (parameters, Hugging Face names) and
  /// optimizer.safetensors (moments) as the checkpoint `dir`, committed as
  /// a whole with its manifest (Checkpoint.h): whole tensors, whatever the
  /// layout (split ones are gathered; every rank must call it, rank 0
  /// writes).
  Status save(const std::string &dir,
              const CheckpointFault &fault = CheckpointFault()) const;
  /// Every rank's buffers, its arena and its peak resident memory, in rank
  /// order (every rank must call it; without a communicator, this rank's
  /// alone).
  StatusOr<std::vector<RankMemory>> gatherMemory() const;

  /// Restores a checkpoint written by `save` for the same model, in any
  /// layout: each rank takes its piece.
  Status load(const std::string &dir);
  /// Takes parameters from a Hugging Face safetensors file (extra tensors
  /// ignored, a "transformer." prefix optional; every parameter required).
  Status loadWeights(const std::string &path);

private:
  Trainer(std::unique_ptr<Device> device,
          std::unique_ptr<Communicator> communicator,
          std::unique_ptr<Executor> executor,
          std::unique_ptr<TokenSource> data);

  std::string fingerprint() const;
  /// Whether every update of the last step is finite on every rank.
  StatusOr<bool> updatesAreFinite() const;
  /// Where this rank's piece of argument `argument` sits in the whole.
  ShardLayout layoutOf(size_t argument) const;
  /// The whole tensor of an argument (gathered from every rank if split).
  Status gatherArgument(size_t argument, SafetensorsEntry &entry) const;

  /// Fills an input argument with this rank's piece of the rows of the
  /// whole batch `global` ([batch, seq], row-major) starting at `firstRow`.
  Status scatterInput(int64_t argument, const std::vector<int32_t> &global,
                      int64_t firstRow);
  /// Writes this rank's box of the whole tensor `values` (in the layout of
  /// argument `argument`) into the argument.
  Status writeBox(size_t argument, const std::vector<float> &values);

  // Destroyed in reverse: the executor before the device it allocated on.
  std::unique_ptr<Device> device_;
  std::unique_ptr<Communicator> communicator_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<TokenSource> data_;
  int64_t completedSteps_ = 0;
  int64_t batch_ = 0, seq_ = 0;
  /// The tokens and targets inputs of each micro-batch, in order (one of
  /// each without micro-batches).
  std::vector<int64_t> tokensArgs_, targetsArgs_;
  int64_t stepArg_ = -1;
  int64_t lossScaleArg_ = -1;
  DynamicLossScale lossScale_;
  /// Updates made (steps skipped for an overflow make none).
  int64_t optimizerSteps_ = 0;
  bool overflowNextStep_ = false;
  float lastLoss_ = 0;
};

/// `trellis run`: trains for options.steps steps, printing a line per step
/// and a summary; returns the process exit code.
int runTrainingCommand(const TrainOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TRAINER_H
