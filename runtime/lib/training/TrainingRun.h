//===- TrainingRun.h - The steps of trellis run's body ----------*- C++ -*-===//
//
// What runTrainingCommand (TrainingCommand.cpp) does, in order: join an
// outside launcher, check the options, start the ranks or train this one
// step by step, then summarize, save and write the trace. A step that can
// fail returns a Status: the command prints it and exits with 1.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_LIB_TRAINING_TRAININGRUN_H
#define TRELLIS_RUNTIME_LIB_TRAINING_TRAININGRUN_H

#include "trellis/Runtime/Checkpoint.h"
#include "trellis/Runtime/Rendezvous.h"
#include "trellis/Runtime/Status.h"
#include "trellis/Runtime/TrainOptions.h"
#include "trellis/Runtime/Trainer.h"

#include <fstream>
#include <memory>
#include <optional>
#include <string>

namespace trellis::runtime {

//===----------------------------------------------------------------------===//
// Fault injection for tests (Faults.cpp)
//===----------------------------------------------------------------------===//

/// --inject-fault ACTION:RANK:STEP: crash, hang or overflow on rank RANK
/// before step STEP (rank -1: none).
struct Fault {
  std::string action;
  int64_t rank = -1, step = -1;
};

/// --inject-save-fault POINT:STEP: the save of step STEP fails at POINT
/// (step -1: none).
struct SaveFault {
  CheckpointFault fault;
  int64_t step = -1;
};

struct InjectedFaults {
  Fault fault;
  SaveFault saveFault;
};

/// Parses --inject-fault, then --inject-save-fault.
StatusOr<InjectedFaults> parseInjectedFaults(const TrainOptions &options);

/// Acts out `fault` if it is due before this rank's next step: a crash and
/// a hang never return; an overflow makes the next step's gradients
/// overflow.
void injectDueFault(Trainer &trainer, const Fault &fault);

//===----------------------------------------------------------------------===//
// Before training (Startup.cpp)
//===----------------------------------------------------------------------===//

/// For a process torchrun, mpirun or srun started (options.rank < 0 and
/// their variables set): takes its rank from them into `options` and
/// returns the rendezvous store rank 0 serves (null on the other ranks, and
/// for a process no outside launcher started).
StatusOr<std::unique_ptr<TcpStoreServer>>
joinOuterLaunch(TrainOptions &options);

/// What every rank would reject, checked before any starts: the options,
/// the injected faults (returned), the checkpoint's place, the device.
StatusOr<InjectedFaults> checkRunOptions(const TrainOptions &options);

/// The launcher (options.rank < 0): where the plan or the options ask for
/// several ranks, starts one process per rank, waits for them and returns
/// their exit code; nullopt where this process trains alone.
StatusOr<std::optional<int>> launchRanksIfNeeded(const TrainOptions &options);

//===----------------------------------------------------------------------===//
// The steps (StepLoop.cpp)
//===----------------------------------------------------------------------===//

/// The executor's profiling, tracing and step recording (--profile,
/// --trace, --cuda-graph).
void setExecutorModes(Trainer &trainer, const TrainOptions &options);

/// The steps this run made and the time they took.
struct StepTimes {
  /// Steps completed before the run's first (a resumed checkpoint's).
  int64_t firstStep = 0;
  /// The steps in the mean: all but the first, which warms caches and
  /// allocations (unless it is the only one).
  double totalSeconds = 0;
  int64_t timedSteps = 0;
};

/// Runs options.steps steps, each followed by its evaluation, its report
/// and its periodic checkpoint.
StatusOr<StepTimes> trainSteps(Trainer &trainer, const TrainOptions &options,
                               const InjectedFaults &faults,
                               std::ofstream &metrics);

/// One finished step, as its report shows it.
struct StepOutcome {
  /// The steps completed after it.
  int64_t step = 0;
  double seconds = 0;
  /// Whether its update was dropped: --on-nonfinite skip, or an fp16
  /// overflow.
  bool skipped = false;
  /// Whether it is the run's last.
  bool lastStep = false;
  /// The held-out loss evaluated after it, if any.
  std::optional<double> evalLoss;
};

//===----------------------------------------------------------------------===//
// Evaluation (Evaluation.cpp)
//===----------------------------------------------------------------------===//

/// The held-out loss after a step: every --eval-every steps and after the
/// last; nullopt between them and without --eval-data.
StatusOr<std::optional<double>>
evaluateAfterStep(Trainer &trainer, const TrainOptions &options, bool lastStep);

/// A run of no steps evaluates the weights it started from (rank 0 prints
/// the loss).
Status evaluateWithoutSteps(Trainer &trainer, const TrainOptions &options);

//===----------------------------------------------------------------------===//
// Reports (StepReport.cpp, Metrics.cpp, Summary.cpp)
//===----------------------------------------------------------------------===//

/// Rank 0's lines for a step on stdout: the step line (every --log-every
/// steps and the last), its evaluation, why its update was skipped.
void printStepReport(Trainer &trainer, const TrainOptions &options,
                     const StepOutcome &outcome);

/// "eval step S | loss L | B batches".
void printEvalLine(int64_t step, double loss, int64_t batches);

/// Opens --metrics where this process writes it (rank 0, or node 0's
/// launcher, which so fails before training when the file cannot be
/// written); appends when resuming. Leaves `metrics` closed elsewhere.
Status openMetrics(const TrainOptions &options, std::ofstream &metrics);

/// Appends a step's JSON record to the metrics file.
Status writeMetricsRecord(std::ofstream &metrics, Trainer &trainer,
                          const TrainOptions &options,
                          const StepOutcome &outcome);

/// After the steps: rank 0's summary and warmup note, each rank's memory
/// for a pipeline (every rank must call it), rank 0's --profile table.
Status reportRun(Trainer &trainer, const TrainOptions &options,
                 const StepTimes &times);

//===----------------------------------------------------------------------===//
// Checkpoints (Checkpoints.cpp)
//===----------------------------------------------------------------------===//

/// The checkpoint of every --save-every steps, after the step that
/// completes them.
Status savePeriodicCheckpoint(Trainer &trainer, const TrainOptions &options,
                              const SaveFault &saveFault);

/// A run that failed after `firstStep` (the step it started from): when
/// the state after its last completed step is intact (the failure came
/// before the step began writing it: its data, its batch) and it has not
/// been saved, saves it as --save would at the end, then returns `failure`
/// naming the save: the work is not lost. A run of one process only: a
/// job's ranks would all have to take part in the gathering save.
Status saveBeforeFailing(Trainer &trainer, const TrainOptions &options,
                         const SaveFault &saveFault, int64_t firstStep,
                         const Status &failure);

/// The checkpoint at the run's end (--save), unless the last step's
/// periodic one is it.
Status saveFinalCheckpoint(Trainer &trainer, const TrainOptions &options,
                           const SaveFault &saveFault);

//===----------------------------------------------------------------------===//
// The trace (RunTrace.cpp)
//===----------------------------------------------------------------------===//

/// The launcher's check that --trace can be written, before training; it
/// leaves no file (only a finished run leaves a trace).
Status prepareTrace(const TrainOptions &options);

/// After the launched ranks end: merges their trace files into --trace
/// (one node) or removes the trace of a failed run.
Status finishLaunchedTrace(const TrainOptions &options, int exitCode,
                           int64_t ranks);

/// Writes this rank's trace file; a lone process merges it into --trace.
Status writeTrace(Trainer &trainer, const TrainOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_LIB_TRAINING_TRAININGRUN_H
