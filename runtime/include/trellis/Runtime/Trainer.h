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
#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Safetensors.h"
#include "trellis/Runtime/ShardLayout.h"
#include "trellis/Runtime/Status.h"
#include "trellis/Runtime/TrainOptions.h"

#include <memory>
#include <string>
#include <vector>

namespace trellis::runtime {

class TokenSource;

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

/// A figure of the step a plan reports: its result, name and report, and
/// the last step's values where this rank holds them.
struct StepMetric {
  int64_t result = -1;
  std::string name;
  Result::Report report;
  std::vector<int64_t> shape;
  std::vector<float> values;
  /// Whether a step has written `values` on this rank.
  bool present = false;
  /// The report's summary of the values (nullopt before a step).
  std::optional<double> summary() const {
    if (!present)
      return std::nullopt;
    return summarizeMetric(report.summary, shape, values);
  }
};

class Trainer {
public:
  ~Trainer();

  /// Builds a trainer for `options` (reads the plan, opens the data,
  /// initializes or loads the state).
  static StatusOr<std::unique_ptr<Trainer>> create(const TrainOptions &options);
  /// The same for a plan already read (options.planPath is unused).
  static StatusOr<std::unique_ptr<Trainer>> create(const TrainOptions &options,
                                                   Plan plan);

  /// Runs one training step on the next batch of the data source; the loss
  /// is then `lastLoss()`.
  Status step();
  /// Runs one training step on the global batch `tokens` and `targets`
  /// (batchSize() x seqLength() token ids each, row-major, every id below
  /// vocabSize()): each rank takes its piece. Every rank must call it with
  /// the same batch.
  Status step(const int32_t *tokens, const int32_t *targets);
  /// Checks a global batch for step(tokens, targets): every id in [0,
  /// vocabSize()). Talks to no other rank.
  Status checkBatch(const int32_t *tokens, const int32_t *targets) const;

  /// The global batch's shape and the vocabulary.
  int64_t batchSize() const { return batch_; }
  /// Notes on data too small for what the run draws from it: token data
  /// with fewer distinct windows than a batch's rows, or held-out data
  /// with fewer windows than `evalBatches` batches read (they repeat).
  std::vector<std::string> dataNotes(int64_t evalBatches) const;
  int64_t seqLength() const { return seq_; }
  int64_t vocabSize() const { return vocab_; }

  /// The names of the tensors readTensor and writeTensor take, in plan
  /// order: parameters by their own names; AdamW's moments as
  /// "adam_m.NAME" and "adam_v.NAME", mixed precision's fp32 master weights
  /// as "master.NAME" (the names of a checkpoint's files).
  std::vector<std::string> tensorNames() const;
  /// The whole (unsplit) shape of a named tensor.
  StatusOr<std::vector<int64_t>> tensorShape(const std::string &name) const;
  /// The whole tensor `name`, as fp32 values (gathered if split: every rank
  /// must call it).
  Status readTensor(const std::string &name, std::vector<float> &values) const;
  /// The memory of tensor `name` itself, when this rank holds it whole, as
  /// fp32, in host memory: valid while the trainer lives, updated in place
  /// by each step; writes through it change this rank's copy only. Fails
  /// saying which condition does not hold.
  StatusOr<float *> tensorView(const std::string &name);
  /// Sets the whole tensor `name` from `count` fp32 values (each rank keeps
  /// its piece; every rank must call it with the same values). Refuses a
  /// wrong count and values that are not finite.
  Status writeTensor(const std::string &name, const float *values,
                     int64_t count);

  int64_t completedSteps() const { return completedSteps_; }
  /// Whether the parameters and optimizer states are those after
  /// completedSteps(): false once a step failed after it began writing them
  /// (its update may be half applied); a step that failed reading its data
  /// or checking its batch leaves them intact.
  bool stateIntact() const { return stateIntact_; }
  /// This process's rank (0 without a communicator).
  int64_t rank() const;
  /// The loss of the last step on every rank (0 before the first).
  float lastLoss() const { return lastLoss_; }
  /// Whether the trainer has held-out data (TrainOptions::evalData).
  bool evaluates() const { return evalData_ != nullptr; }
  /// The mean loss of the held-out data's first `batches` batches under
  /// the current weights (every rank must call it), through the plan's
  /// forward-only evaluation (Executor::evaluate): a forward of each batch,
  /// no gradients, no update. Nothing of the training state changes.
  StatusOr<double> evaluate(int64_t batches);
  /// Why the last step's update was skipped for a value that is not finite
  /// (--on-nonfinite skip), or "" when it was applied.
  const std::string &lastSkipReason() const { return lastSkipReason_; }
  /// The learning rate the last step's update used, for plans with a
  /// schedule (nullopt otherwise, and before the first step).
  std::optional<double> lastLearningRate() const { return lastLearningRate_; }
  /// The figures of the step the plan reports (each result with a
  /// report, as the pass that makes it declared it), in the plan's order,
  /// with the last step's values on the ranks that hold them (every rank,
  /// or the pipeline stages that make them).
  const std::vector<StepMetric> &metrics() const { return metrics_; }
  /// The metric called `name` with a last step's values on this rank, or
  /// null (the gradient norm of a plan that clips: "grad_norm"; the
  /// experts' load: "expert_load").
  const StepMetric *lastMetric(std::string_view name) const;
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
  /// save's two halves: gathering every tensor whole (collective: every
  /// rank must call it), then rank 0 writing and committing them (local:
  /// a failure there, a full disk or a mistyped path, leaves every rank in
  /// step; other ranks write nothing).
  struct CheckpointTensors {
    SafetensorsFile model, optimizer;
  };
  StatusOr<CheckpointTensors> gatherCheckpoint() const;
  Status
  writeCheckpoint(const std::string &dir, const CheckpointTensors &tensors,
                  const CheckpointFault &fault = CheckpointFault()) const;
  /// writeCheckpoint's files, in `partial` (beginCheckpoint's), committed
  /// as `dir`.
  Status writeCheckpointFiles(const std::string &partial,
                              const std::string &dir,
                              const CheckpointTensors &tensors,
                              const CheckpointFault &fault) const;
  /// Every rank's buffers, its arena and its peak resident memory, in rank
  /// order (every rank must call it; without a communicator, this rank's
  /// alone).
  StatusOr<std::vector<RankMemory>> gatherMemory() const;

  /// Restores a checkpoint written by `save` for the same model, in any
  /// layout: each rank takes its piece. A refused checkpoint changes
  /// nothing.
  Status load(const std::string &dir);
  /// Takes parameters from a Hugging Face safetensors file (extra tensors
  /// ignored, a "transformer." prefix optional; every parameter required).
  /// Refused weights change nothing.
  Status loadWeights(const std::string &path);

private:
  Trainer(std::unique_ptr<Device> device,
          std::unique_ptr<Communicator> communicator,
          std::unique_ptr<Executor> executor,
          std::unique_ptr<TokenSource> data);

  std::string fingerprint() const;
  /// Replaces `values` by their minimum over every rank (every rank must
  /// call it; without a communicator, nothing).
  Status minimumOverMesh(float *values, int64_t count) const;
  /// Whether the last step's updates applied on every rank: a guarded
  /// plan's guard is finite, else every update is finite.
  StatusOr<bool> updatesAreFinite() const;
  /// What is not finite after the last step's program, on any rank (every
  /// rank must call it): "the loss is not finite", "the update of \"NAME\"
  /// is not finite" for the first parameter (or fp32 master) in plan
  /// order, or "" when all are.
  StatusOr<std::string> firstNonFinite(bool checkUpdates,
                                       bool checkLoss) const;
  /// The argument a tensorNames() name refers to, or -1.
  int64_t namedArgument(const std::string &name) const;
  /// Sends the loss from the last stage's ranks to every rank (a plan
  /// whose loss lives on some stages only).
  Status shareLoss();
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
  std::unique_ptr<TokenSource> evalData_;
  /// Checks a batch and writes it into the inputs (each micro-batch's
  /// rows, this rank's piece).
  Status writeBatch(const int32_t *tokens, const int32_t *targets);
  /// Writes the step count the next update makes and `lossScale` into the
  /// plan's arguments that hold them.
  Status writeStepArguments(float lossScale);
  /// Reads the step's loss where it lives and shares it with every rank
  /// (lastLoss_).
  Status collectLoss();
  int64_t completedSteps_ = 0;
  /// Windows (batch rows) of data the completed steps consumed: where the
  /// next batch starts (BatchPosition); checkpoints keep it.
  int64_t dataPosition_ = 0;
  int64_t batch_ = 0, seq_ = 0, vocab_ = 0;
  /// The tokens and targets inputs of each micro-batch, in order (one of
  /// each without micro-batches).
  std::vector<int64_t> tokensArgs_, targetsArgs_;
  int64_t stepArg_ = -1;
  std::optional<LrSchedule> schedule_;
  std::optional<double> lastLearningRate_;
  std::vector<StepMetric> metrics_;
  int64_t lossScaleArg_ = -1;
  DynamicLossScale lossScale_;
  /// Updates made (steps skipped for an overflow make none).
  int64_t optimizerSteps_ = 0;
  bool overflowNextStep_ = false;
  bool stateIntact_ = true;
  float lastLoss_ = 0;
  /// TrainOptions::onNonfinite.
  std::string onNonfinite_ = "stop";
  /// Why the last step's update was dropped (--on-nonfinite skip), or "".
  std::string lastSkipReason_;
};

/// `trellis run`: trains for options.steps steps, printing a line per step
/// and a summary; returns the process exit code.
int runTrainingCommand(const TrainOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TRAINER_H
