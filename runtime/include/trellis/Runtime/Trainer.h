//===- Trainer.h - Training loop over a plan --------------------*- C++ -*-===//
//
// Steps a training plan: feeds batches, runs the program, applies the
// updates, saves and restores checkpoints. This header is free of
// third-party types and exceptions, so -fno-exceptions code (the driver)
// can include it.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_TRAINER_H
#define TRELLIS_RUNTIME_TRAINER_H

#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Status.h"

#include <memory>
#include <string>

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
  /// Directory to write a checkpoint into after the last step ("" = none).
  std::string saveDir;
  /// Directory of a checkpoint to resume from ("" = none).
  std::string loadDir;
  /// A Hugging Face .safetensors file to take initial weights from.
  std::string weightsPath;
  /// OpenBLAS threads.
  int threads = 1;
  /// Print a line every this many steps (the last step always prints).
  int64_t logEvery = 1;
  /// Print the time spent per op kind after the run.
  bool profile = false;
};

class Trainer {
public:
  Trainer(Plan plan, std::unique_ptr<TokenSource> data, uint64_t seed);
  ~Trainer();

  /// Builds a trainer for `options` (reads the plan, opens the data,
  /// initializes or loads the state).
  static StatusOr<std::unique_ptr<Trainer>> create(const TrainOptions &options);

  /// Runs one training step; the loss is then `lastLoss()`.
  Status step();

  int64_t completedSteps() const { return completedSteps_; }
  float lastLoss() const { return executor_.loss(); }
  Executor &executor() { return executor_; }
  int64_t tokensPerStep() const { return batch_ * seq_; }

  /// Writes model.safetensors (parameters, Hugging Face names) and
  /// optimizer.safetensors (moments and step) into `dir`.
  Status save(const std::string &dir) const;
  /// Restores a checkpoint written by `save` for the same model.
  Status load(const std::string &dir);
  /// Takes parameters from a Hugging Face safetensors file (extra tensors
  /// ignored, a "transformer." prefix optional; every parameter required).
  Status loadWeights(const std::string &path);

private:
  std::string fingerprint() const;

  Executor executor_;
  std::unique_ptr<TokenSource> data_;
  int64_t completedSteps_ = 0;
  int64_t batch_ = 0, seq_ = 0;
  int64_t tokensArg_ = -1, targetsArg_ = -1, stepArg_ = -1;
};

/// `trellis run`: trains for options.steps steps, printing a line per step
/// and a summary; returns the process exit code.
int runTrainingCommand(const TrainOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TRAINER_H
