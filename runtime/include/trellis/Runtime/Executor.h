//===- Executor.h - Runs a stage's program on a device ----------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_EXECUTOR_H
#define TRELLIS_RUNTIME_EXECUTOR_H

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Communicator.h"
#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Tensor.h"
#include "trellis/Runtime/Trace.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace trellis::runtime {

/// Owns the memory of a plan's buffers on a Device and executes the
/// selected stage's step over them; it names no backend.
///
/// Replay: a step runs the stage's schedule, each action replaying its
/// program (kept once, prepared once per instruction) over the buffers of
/// its micro-batch (Plan::bindings). The step's timeline (stageTimeline)
/// indexes instructions in the order they run for the plans below.
///
/// Memory plan: arguments, results and accumulators live in their own
/// allocations for the executor's lifetime. Every other buffer lives in one
/// arena, at an offset chosen when the executor is built so that buffers whose
/// lifetimes (first write to last read, both inclusive) overlap never share
/// bytes; the arena is allocated once, and its size is the step's peak of
/// temporaries.
///
/// Overlap: with a communicator, collective instructions run in order on the
/// device's communication stream while the program goes on; the program
/// waits for a collective only at its "wait point": the first instruction
/// that reads its results (or communicates itself, or the end of the step),
/// or the issue of a later collective that would put more than two in
/// flight and more than their byte budget (trellis/Common/MemoryPlan.h),
/// whichever comes first. Lifetimes of a
/// collective's buffers reach its wait point, so the arena never reuses
/// memory a collective in flight may touch.
class Executor {
public:
  /// Memory a rank needs besides its buffers (kernels' scratch, the
  /// runtime's code and heap, the communication library's buffers): this
  /// much, plus 1/16 of the buffers.
  static constexpr int64_t kMemoryMarginBytes = int64_t(64) << 20;

  /// Allocates the plan's memory on `device` (which must outlive the
  /// executor). `communicator` runs the plan's collectives; it may be null
  /// for a plan without any.
  /// With `updatesInPlace`, an optimizer update may be computed in its
  /// parameter's (or state's) own memory when nothing reads the old value
  /// after it; without, every update has its own buffer until
  /// commitUpdates, so a step can still be dropped after its program ran
  /// (a loss-scaled plan keeps them apart unless its updates are guarded,
  /// Plan::updateGuardResult).
  static StatusOr<std::unique_ptr<Executor>>
  create(Plan plan, Device &device, Communicator *communicator = nullptr,
         bool updatesInPlace = true);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  const Plan &plan() const { return plan_; }

  Device &device() const { return device_; }

  /// The buffer bound to argument `index` (device memory).
  Tensor &argument(size_t index) {
    return buffers_[plan_.arguments[index].buffer];
  }
  const Tensor &argument(size_t index) const {
    return buffers_[plan_.arguments[index].buffer];
  }
  /// The buffer of result `index`.
  const Tensor &result(size_t index) const {
    return buffers_[plan_.results[index].buffer];
  }
  /// Copies argument `index` to host memory (its buffer's bytes).
  Status readArgument(size_t index, void *host) const;
  /// Copies result `index` to host memory.
  Status readResult(size_t index, void *host) const;
  /// Copies host memory into argument `index`.
  Status writeArgument(size_t index, const void *host);
  /// Argument `index` as f32 values (converted from its float dtype).
  Status readArgumentValues(size_t index, float *values) const;
  /// Result `index` as f32 values (converted from its float dtype).
  Status readResultValues(size_t index, float *values) const;
  /// Writes f32 values into argument `index`, rounded to its float dtype
  /// (to nearest, ties to even).
  Status writeArgumentValues(size_t index, const float *values);
  /// The f32 scalar of result 0.
  StatusOr<float> loss() const;

  /// Runs one step: every scheduled action's program, in order. With step
  /// recording on, the second step is recorded and every later one
  /// replays the recording (setStepRecording).
  Status run();
  /// Runs the plan's forward-only evaluation (StageProgram::evaluation):
  /// the loss of the inputs written, without gradients or updates. Fails,
  /// saying so, for a plan without one.
  Status evaluate();

  /// Copies each result marked `updates` into the argument it replaces:
  /// the end of a training step. A result computed in place (below) is
  /// there already.
  Status commitUpdates();
  /// Whether result `index` is written into its argument's memory: the
  /// instruction that makes it is the last to read the argument (reading
  /// it element by element, as an optimizer update does), so the step
  /// needs no second copy. With a loss scale only when the updates are
  /// guarded: unguarded, a skipped step keeps the old values.
  bool updatesInPlace(size_t index) const {
    return inPlace_[plan_.results[index].buffer] >= 0;
  }

  /// Bytes held by all buffers: persistent ones plus the arena.
  int64_t allocatedBytes() const { return persistentBytes_ + arenaBytes_; }
  int64_t arenaBytes() const { return arenaBytes_; }

  /// When on, run() accumulates the wall time of each op kind.
  void setProfiling(bool enabled) { profiling_ = enabled; }
  /// Seconds spent per op name since profiling started, and call counts.
  /// Collectives count their time on the communication stream; the time
  /// the program waited for them is under "<op> (wait)".
  std::map<std::string, std::pair<double, int64_t>> profile() const;
  /// Floating-point operations of one step per op name, from the op
  /// table's costs over the instructions' shapes (the compiler's report
  /// counts the same, `flops_by_op`): with the profile, each op's achieved
  /// rate. Ops that compute nothing are left out.
  std::map<std::string, double> stepFlops() const;

  /// When on, run() records every instruction (and every wait for a
  /// collective) as a slice of its lane.
  void setTracing(bool enabled) { tracing_ = enabled; }

  /// Step recording (a CUDA graph), where the device records steps
  /// (Device::recordsSteps): the first step runs instruction by
  /// instruction (what launches do once, such as a library's first call
  /// or a communicator's connection, happens there), the second is
  /// recorded and replayed, and later steps replay the recording.
  /// Evaluations, profiled and traced steps run instruction by
  /// instruction. A recording that fails fails the step where the rank
  /// has peers (their exchanges were recorded, not run); alone, the step
  /// runs instruction by instruction instead, and so do the later ones.
  /// Off by default.
  void setStepRecording(bool enabled) { recordingWanted_ = enabled; }
  /// Why steps run instruction by instruction although recording is on:
  /// empty when they are (or will be) replayed.
  std::string stepRecordingObstacle() const;
  /// Whether run() replays a recorded step.
  bool replaysSteps() const { return recorded_ != nullptr; }
  /// The slices recorded since tracing started, in completion order.
  std::vector<TraceSlice> trace() const;

private:
  Executor(Plan plan, Device &device, Communicator *communicator);
  /// Places every buffer in the arena or its own allocation.
  Status allocate();
  /// The device's prepared launch of every compute instruction of each
  /// program, once.
  Status prepareLaunches();
  /// The buffers a run for `microBatch` (-1: the step) binds.
  BufferTable bufferTable(int64_t microBatch);
  /// What the kernel of timeline entry `i` sees.
  KernelArgs kernelArgs(size_t i);
  /// "action F3 instruction 5 (matmul)", for messages.
  std::string describe(size_t i) const;
  /// Refuses, before anything is allocated, a stage whose arena and
  /// `persistentBytes` of its own allocations, with the margin below,
  /// exceed the device's memory budget; names both figures.
  Status checkMemoryBudget(int64_t persistentBytes) const;
  /// The last instruction of the run of optimizer updates (adamw, sgd)
  /// starting at `first`, within one schedule action, none reading what an
  /// earlier one of the run writes; `first` itself when it is no update.
  size_t updateRunEnd(size_t first) const;
  /// Plans the stage's memory (planStepMemory): sets waitPoint_, inPlace_
  /// and arenaBytes_; returns each buffer's arena offset (-1: not in it).
  std::vector<int64_t> planMemory();
  /// `tensor` as host f32 values.
  Status readValues(const Tensor &tensor, float *values) const;
  /// Adds one executed instruction to the profile and the trace.
  void record(const std::string &op, double startMicros, double endMicros,
              TraceSlice::Lane lane);

  /// Runs the timeline's instructions (those `only` marks, when given);
  /// while `recording`, leaves the device unsynchronized (the recording
  /// ends first).
  Status runTimeline(const std::vector<bool> *only, bool recording = false);
  /// Records the step (run eagerly before), then replays it.
  Status recordStep();
  /// Replays the recorded step and waits for it.
  Status replayStep();

  /// The selected stage's step, by timeline index (the index every plan
  /// below is in).
  std::vector<TimelineEntry> timeline_;
  /// Per timeline entry: whether the evaluation runs it (empty: the plan
  /// has no evaluation). Its instructions keep their wait points: each
  /// transfer and collective completes no later than in the step, so the
  /// step's arena holds.
  std::vector<bool> evaluation_;
  /// For each collective instruction, the index before which the program
  /// waits for it; -1 for other instructions.
  std::vector<int64_t> waitPoint_;
  /// Per buffer: the argument buffer an update result is computed in, or
  /// -1.
  std::vector<int64_t> inPlace_;
  /// create()'s updatesInPlace.
  bool updatesInPlace_ = true;

  Plan plan_;
  Device &device_;
  Communicator *communicator_ = nullptr;
  std::vector<Tensor> buffers_;
  /// Per action program and instruction: what the device prepared for it,
  /// or null (empty for programs the schedule never runs).
  std::vector<std::vector<std::unique_ptr<PreparedLaunch>>> prepared_;
  std::vector<std::unique_ptr<DeviceAllocation>> persistent_;
  std::unique_ptr<DeviceAllocation> arena_;
  int64_t persistentBytes_ = 0;
  int64_t arenaBytes_ = 0;
  bool profiling_ = false;
  bool tracing_ = false;
  /// Step recording: asked for; the first instruction the device cannot
  /// record ("" when all can, set at create); steps run eagerly so far;
  /// the recording.
  bool recordingWanted_ = false;
  std::string unrecordable_;
  /// Why recording failed in a run without peers (it then runs eagerly).
  std::string recordingFailure_;
  int64_t eagerSteps_ = 0;
  std::unique_ptr<RecordedStep> recorded_;
  /// Guards profile_ and trace_ (communication work records too).
  mutable std::mutex profileMutex_;
  std::map<std::string, std::pair<double, int64_t>> profile_;
  std::vector<TraceSlice> trace_;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_EXECUTOR_H
