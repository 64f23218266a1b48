//===- Executor.cpp - Runs a plan's program on host buffers ---------------===//

#include "trellis/Runtime/Executor.h"

#include "trellis/Common/HalfFloat.h"
#include "trellis/Common/MemoryPlan.h"
#include "trellis/Runtime/OpShapes.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>

namespace trellis::runtime {

namespace {

int64_t bufferBytes(const BufferDesc &desc) {
  return desc.numElements() * dtypeBytes(desc.dtype);
}

} // namespace

std::vector<int64_t> Executor::planMemory() {
  // The stage's step as the shared lifetime analysis sees it.
  std::vector<PlannedInstruction> program =
      plannedTimeline(plan_, plan_.stage, timeline_);
  std::vector<PlannedBuffer> buffers(plan_.buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b)
    buffers[b].bytes = bufferBytes(plan_.buffers[b]);
  for (const Result &result : plan_.results)
    buffers[result.buffer].kind = PlannedBuffer::Kind::Result;
  for (const Argument &argument : plan_.arguments)
    buffers[argument.buffer].kind = PlannedBuffer::Kind::Argument;
  // Updates computed in their argument's memory; with a loss scale only
  // when the updates are guarded (they skip an overflowing step
  // themselves), since the runtime drops such a step by not committing it.
  std::vector<PlannedUpdate> updates;
  bool scaled = std::any_of(
      plan_.arguments.begin(), plan_.arguments.end(),
      [](const Argument &a) { return a.role == ArgumentRole::LossScale; });
  if (updatesInPlace_ && (!scaled || plan_.updateGuardResult() >= 0))
    for (const Result &result : plan_.results) {
      if (!result.updates || !plan_.holds(result.stages))
        continue;
      int64_t into = plan_.arguments[*result.updates].buffer;
      const BufferDesc &a = plan_.buffers[result.buffer];
      const BufferDesc &b = plan_.buffers[into];
      if (a.shape == b.shape && a.dtype == b.dtype)
        updates.push_back({result.buffer, into});
    }
  StepMemoryPlan memory = planStepMemory(program, buffers, updates);
  waitPoint_ = std::move(memory.waitPoints);
  inPlace_ = std::move(memory.inPlace);
  arenaBytes_ = memory.arena.bytes;
  return std::move(memory.arena.offsets);
}

StatusOr<std::unique_ptr<Executor>>
Executor::create(Plan plan, Device &device, Communicator *communicator,
                 bool updatesInPlace) {
  std::unique_ptr<Executor> executor(
      new Executor(std::move(plan), device, communicator));
  executor->updatesInPlace_ = updatesInPlace;
  TRELLIS_RETURN_IF_ERROR(executor->allocate());
  TRELLIS_RETURN_IF_ERROR(executor->prepareLaunches());
  return executor;
}

Status Executor::prepareLaunches() {
  // Once per instruction of each program the schedule runs, over the
  // buffers of its first run: every run binds buffers of the same types.
  const StageProgram &stage = plan_.stageProgram();
  prepared_.resize(stage.programs.size());
  std::vector<bool> done(stage.programs.size(), false);
  for (const ScheduledAction &action : stage.schedule) {
    if (done[action.program])
      continue;
    done[action.program] = true;
    const ActionProgram &program = stage.programs[action.program];
    prepared_[action.program].resize(program.instructions.size());
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const Instruction &instruction = program.instructions[i];
      if (isCollective(instruction.op))
        continue;
      KernelArgs args{instruction, bufferTable(action.microBatch),
                      program.instructionAxes[i], communicator_};
      std::string where = "program " + program.name + " instruction " +
                          std::to_string(i) + " (" + instruction.op + ")";
      StatusOr<std::unique_ptr<PreparedLaunch>> prepared =
          device_.prepare(args);
      if (!prepared.ok())
        return prepared.status().withContext(where);
      prepared_[action.program][i] = std::move(*prepared);
      if (unrecordable_.empty() && !device_.recordable(args))
        unrecordable_ = where;
    }
  }
  return Status::success();
}

Executor::Executor(Plan plan, Device &device, Communicator *communicator)
    : plan_(std::move(plan)), device_(device), communicator_(communicator) {
  timeline_ = stageTimeline(plan_, plan_.stage);
  evaluation_ = evaluationMask(plan_, plan_.stage);
}

BufferTable Executor::bufferTable(int64_t microBatch) {
  if (microBatch < 0 || plan_.bindings.empty())
    return BufferTable(buffers_);
  return BufferTable(buffers_, &plan_.bindings[microBatch]);
}

KernelArgs Executor::kernelArgs(size_t i) {
  const TimelineEntry &entry = timeline_[i];
  const ScheduledAction &action = plan_.stageProgram().schedule[entry.action];
  const PreparedLaunch *prepared =
      prepared_[action.program].empty()
          ? nullptr
          : prepared_[action.program][entry.index].get();
  return KernelArgs{*entry.instruction, bufferTable(action.microBatch),
                    *entry.axes, communicator_, prepared};
}

std::string Executor::describe(size_t i) const {
  const TimelineEntry &entry = timeline_[i];
  const StageProgram &stage = plan_.stageProgram();
  std::string action = stage.schedule.size() > 1
                           ? "action " + stage.schedule[entry.action].name + " "
                           : std::string();
  return action + "instruction " + std::to_string(entry.index) + " (" +
         entry.instruction->op + ")";
}

Status Executor::checkMemoryBudget(int64_t persistentBytes) const {
  MemoryBudget budget = device_.memoryBudget();
  int64_t buffers = arenaBytes_ + persistentBytes;
  int64_t needed = buffers + buffers / 16 + kMemoryMarginBytes;
  if (budget.bytes < 0 || needed <= budget.bytes)
    return Status::success();
  auto mebibytes = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
    return std::string(text);
  };
  std::string rank =
      communicator_ ? "rank " + std::to_string(communicator_->rank())
                    : std::string("this rank");
  return Status::error(
      "not enough memory: " + rank + " needs " + mebibytes(needed) +
      " (buffers " + mebibytes(buffers) + ": arena " +
      mebibytes(arenaBytes_) + " and " + mebibytes(persistentBytes) +
      " of parameters, states and results; a margin of 1/16 and " +
      mebibytes(kMemoryMarginBytes) + " for kernels and the runtime), but " +
      "may allocate " + mebibytes(budget.bytes) + " (" + budget.source +
      "); use more ranks (tp, pp, zero), a smaller batch, or recompute");
}

Status Executor::allocate() {
  std::vector<int64_t> offsets = planMemory();
  // A pipeline stage touches only its own buffers.
  std::vector<bool> used(plan_.buffers.size(), false);
  for (const TimelineEntry &entry : timeline_) {
    for (int64_t b : entry.inputs)
      used[b] = true;
    for (int64_t b : entry.outputs)
      used[b] = true;
  }
  for (const Argument &argument : plan_.arguments)
    used[argument.buffer] =
        used[argument.buffer] || plan_.holds(argument.stages);
  for (const Result &result : plan_.results)
    used[result.buffer] = used[result.buffer] || plan_.holds(result.stages);
  auto ownsAllocation = [&](size_t b) {
    return used[b] && inPlace_[b] < 0 && offsets[b] < 0;
  };
  int64_t persistentBytes = 0;
  for (size_t b = 0; b < plan_.buffers.size(); ++b)
    if (ownsAllocation(b))
      persistentBytes += bufferBytes(plan_.buffers[b]);
  TRELLIS_RETURN_IF_ERROR(checkMemoryBudget(persistentBytes));
  StatusOr<std::unique_ptr<DeviceAllocation>> arena =
      device_.allocate(arenaBytes_);
  if (!arena.ok())
    return arena.status().withContext("the stage's arena");
  arena_ = std::move(*arena);
  buffers_.reserve(plan_.buffers.size());
  for (size_t b = 0; b < plan_.buffers.size(); ++b) {
    const BufferDesc &desc = plan_.buffers[b];
    void *data = nullptr;
    if (ownsAllocation(b)) {
      // Arguments, results, accumulators, and buffers no instruction
      // writes.
      int64_t bytes = bufferBytes(desc);
      StatusOr<std::unique_ptr<DeviceAllocation>> allocation =
          device_.allocate(bytes);
      if (!allocation.ok())
        return allocation.status().withContext("buffer " + std::to_string(b));
      persistentBytes_ += bytes;
      data = (*allocation)->data();
      persistent_.push_back(std::move(*allocation));
    } else if (used[b] && inPlace_[b] < 0) {
      data = static_cast<char *>(arena_->data()) + offsets[b];
    }
    // Otherwise held by another stage (no memory here), or an update
    // computed in its argument's memory (bound below).
    buffers_.emplace_back(desc, data);
  }
  for (size_t b = 0; b < buffers_.size(); ++b)
    if (inPlace_[b] >= 0)
      buffers_[b] = Tensor(plan_.buffers[b], buffers_[inPlace_[b]].raw());
  return Status::success();
}

Executor::~Executor() = default;

void Executor::record(const std::string &op, double startMicros,
                      double endMicros, TraceSlice::Lane lane) {
  if (!profiling_ && !tracing_)
    return;
  std::lock_guard<std::mutex> lock(profileMutex_);
  if (profiling_) {
    auto &entry = profile_[op];
    entry.first += (endMicros - startMicros) * 1e-6;
    ++entry.second;
  }
  if (tracing_)
    trace_.push_back({op, startMicros, endMicros, lane});
}

std::map<std::string, std::pair<double, int64_t>> Executor::profile() const {
  std::lock_guard<std::mutex> lock(profileMutex_);
  return profile_;
}

std::map<std::string, double> Executor::stepFlops() const {
  std::map<std::string, double> flops;
  for (const TimelineEntry &entry : timeline_) {
    const Instruction &instruction = *entry.instruction;
    const OpContract *contract = &instruction.row();
    if (!contract->cost)
      continue;
    std::vector<TensorType> inputs, results;
    for (int64_t buffer : entry.inputs)
      inputs.push_back(
          {plan_.buffers[buffer].shape, plan_.buffers[buffer].dtype});
    for (int64_t buffer : entry.outputs)
      results.push_back(
          {plan_.buffers[buffer].shape, plan_.buffers[buffer].dtype});
    double count =
        contract->cost(OpInstance(inputs, instruction.attrs, results)).flops;
    if (count > 0)
      flops[instruction.op] += count;
  }
  return flops;
}

std::vector<TraceSlice> Executor::trace() const {
  std::lock_guard<std::mutex> lock(profileMutex_);
  return trace_;
}

size_t Executor::updateRunEnd(size_t first) const {
  auto isUpdate = [&](size_t i) {
    return timeline_[i].instruction->row().isUpdate();
  };
  if (!isUpdate(first))
    return first;
  std::vector<bool> written(plan_.buffers.size(), false);
  for (int64_t b : timeline_[first].outputs)
    written[b] = true;
  size_t last = first;
  for (size_t i = first + 1; i < timeline_.size() && isUpdate(i); ++i) {
    // Each schedule action keeps its own trace slice.
    bool startsAction = timeline_[i].action != timeline_[first].action;
    bool readsTheRun =
        std::any_of(timeline_[i].inputs.begin(), timeline_[i].inputs.end(),
                    [&](int64_t b) { return written[b]; });
    if (startsAction || readsTheRun)
      break;
    for (int64_t b : timeline_[i].outputs)
      written[b] = true;
    last = i;
  }
  return last;
}

Status Executor::run() {
  if (!stepRecordingObstacle().empty())
    return runTimeline(nullptr);
  if (recorded_)
    return replayStep();
  if (eagerSteps_ > 0)
    return recordStep();
  Status status = runTimeline(nullptr);
  if (status.ok())
    ++eagerSteps_;
  return status;
}

std::string Executor::stepRecordingObstacle() const {
  if (!recordingWanted_)
    return "step recording is off";
  if (!device_.recordsSteps())
    return "the " + device_.name() + " device records no steps";
  if (profiling_ || tracing_)
    return "profiled and traced steps time each instruction";
  if (!unrecordable_.empty())
    return unrecordable_ + " waits on the host for a value of the step";
  if (!recordingFailure_.empty())
    return "recording the step failed: " + recordingFailure_;
  return "";
}

Status Executor::recordStep() {
  Status begun = device_.beginRecording();
  Status launched =
      begun.ok() ? runTimeline(nullptr, /*recording=*/true) : begun;
  // The recording ends whatever happened: the device runs eagerly again.
  StatusOr<std::unique_ptr<RecordedStep>> recorded =
      begun.ok() ? device_.endRecording()
                 : StatusOr<std::unique_ptr<RecordedStep>>(begun);
  Status failed = !launched.ok() ? launched : recorded.status();
  if (failed.ok()) {
    recorded_ = std::move(*recorded);
    return replayStep();
  }
  (void)device_.synchronize();
  // With peers, once the recording began their exchanges were issued into
  // it and never ran: the job fails. Alone (or when nothing was issued),
  // the step runs eagerly, and so do the later ones.
  if (communicator_ && begun.ok())
    return failed.withContext("recording the step");
  recordingFailure_ = failed.message();
  return runTimeline(nullptr);
}

Status Executor::replayStep() {
  Status replayed = device_.replay(*recorded_);
  Status drained = device_.synchronize();
  return replayed.ok() ? drained : replayed;
}

Status Executor::evaluate() {
  if (evaluation_.empty())
    return Status::error("the plan has no forward-only evaluation (plans "
                         "written by an older trellis compile lack it): "
                         "compile it again");
  return runTimeline(&evaluation_);
}

Status Executor::runTimeline(const std::vector<bool> *only, bool recording) {
  using Lane = TraceSlice::Lane;
  const StageProgram &stage = plan_.stageProgram();
  // Tickets of the collectives in flight, by the instruction they wait at.
  std::vector<std::pair<int64_t, int64_t>> inFlight; // (wait point, ticket)
  std::vector<size_t> inFlightInstruction;
  // Sends and receives in flight, waited for in order of their wait point.
  struct Transfer {
    size_t instruction;
    std::unique_ptr<PendingTransfer> pending;
    double startMicros;
  };
  std::vector<Transfer> transfers;
  // (wait point, sends after receives, index into transfers), earliest on
  // top: a send that completes with a receive is waited for after it.
  using Pending = std::tuple<int64_t, bool, size_t>;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>>
      byWaitPoint;
  auto waitForTransfers = [&](int64_t point) -> Status {
    while (!byWaitPoint.empty() && std::get<0>(byWaitPoint.top()) <= point) {
      Transfer &transfer = transfers[std::get<2>(byWaitPoint.top())];
      byWaitPoint.pop();
      double start = monotonicMicros();
      Status status = transfer.pending->wait();
      transfer.pending.reset();
      double end = monotonicMicros();
      const std::string &op = timeline_[transfer.instruction].instruction->op;
      record(op + " (wait)", start, end, Lane::Compute);
      // In flight from its start until this wait saw it complete.
      record(op, transfer.startMicros, end, Lane::Communication);
      if (!status.ok())
        return status.withContext(describe(transfer.instruction));
    }
    return Status::success();
  };
  auto waitUntil = [&](int64_t point) -> Status {
    TRELLIS_RETURN_IF_ERROR(waitForTransfers(point));
    for (size_t k = 0; k < inFlight.size(); ++k) {
      auto [wait, ticket] = inFlight[k];
      if (wait > point || ticket < 0)
        continue;
      double start = monotonicMicros();
      Status status = device_.waitCommunication(ticket);
      const Instruction &waited =
          *timeline_[inFlightInstruction[k]].instruction;
      record(waited.op + " (wait)", start, monotonicMicros(), Lane::Compute);
      if (!status.ok())
        return status;
      inFlight[k].second = -1;
    }
    return Status::success();
  };

  // The schedule's actions as slices enclosing their instructions (a lone
  // step program has none): the one being run and its start time. An
  // action ends when the next one's first instruction begins.
  bool traceActions = tracing_ && stage.schedule.size() > 1;
  size_t action = timeline_.empty() ? 0 : timeline_.front().action;
  double actionStart = monotonicMicros();
  auto enterAction = [&](size_t next) {
    if (!traceActions || next == action)
      return;
    double now = monotonicMicros();
    record(stage.schedule[action].name, actionStart, now, Lane::Compute);
    action = next;
    actionStart = now;
  };

  Status failure = Status::success();
  for (size_t i = 0; i < timeline_.size() && failure.ok(); ++i) {
    if (only && !(*only)[i])
      continue;
    const TimelineEntry &entry = timeline_[i];
    const Instruction &instruction = *entry.instruction;
    enterAction(entry.action);
    if (communicator_) {
      failure = waitUntil(i);
      if (!failure.ok())
        break;
    }
    if (isPointToPoint(instruction) && communicator_) {
      const CollectiveParameters &transfer =
          *instruction.parametersAs<CollectiveParameters>();
      int64_t peer = transfer.peer;
      int64_t channel = transfer.channel;
      bool sending = isSend(instruction);
      Tensor &buffer =
          sending ? buffers_[entry.inputs[0]] : buffers_[entry.outputs[0]];
      StatusOr<std::unique_ptr<PendingTransfer>> started =
          sending ? communicator_->startSend(*entry.axes, buffer.raw(),
                                             buffer.size(), buffer.desc().dtype,
                                             peer, channel)
                  : communicator_->startRecv(*entry.axes, buffer.raw(),
                                             buffer.size(), buffer.desc().dtype,
                                             peer, channel);
      if (!started.ok()) {
        failure = started.status().withContext(describe(i));
        break;
      }
      byWaitPoint.emplace(waitPoint_[i], sending,
                          transfers.size());
      transfers.push_back({i, std::move(*started), monotonicMicros()});
      continue;
    }
    if (isCollective(instruction.op) && communicator_) {
      int64_t ticket = device_.enqueueCommunication([this, i]() {
        double start = monotonicMicros();
        Status status = device_.runCollective(kernelArgs(i));
        record(timeline_[i].instruction->op, start, monotonicMicros(),
               Lane::Communication);
        return status.withContext(describe(i));
      });
      inFlight.emplace_back(waitPoint_[i], ticket);
      inFlightInstruction.push_back(i);
      continue;
    }
    if (size_t last = only ? i : updateRunEnd(i); last > i) {
      // A run of optimizer updates: one multi-tensor pass, after every
      // collective any of them waits for.
      if (communicator_) {
        failure = waitUntil(static_cast<int64_t>(last));
        if (!failure.ok())
          break;
      }
      std::vector<KernelArgs> updates;
      for (size_t k = i; k <= last; ++k)
        updates.push_back(kernelArgs(k));
      double start = monotonicMicros();
      Status status = device_.launchUpdates(updates);
      record(instruction.op, start, monotonicMicros(), Lane::Compute);
      if (!status.ok())
        failure =
            status.withContext(describe(i) + " and the " +
                               std::to_string(last - i) + " updates after it");
      i = last;
      continue;
    }
    double start = monotonicMicros();
    KernelArgs args = kernelArgs(i);
    Status status = isCollective(instruction.op) ? device_.runCollective(args)
                                                 : device_.launch(args);
    record(instruction.op, start, monotonicMicros(), Lane::Compute);
    if (!status.ok())
      failure = status.withContext(describe(i));
  }
  // The end of the step: everything in flight completes (or fails) first.
  if (Status waited = waitForTransfers(timeline_.size());
      failure.ok() && !waited.ok())
    failure = waited;
  if (failure.ok() && traceActions && !timeline_.empty())
    record(stage.schedule[action].name, actionStart, monotonicMicros(),
           Lane::Compute);
  if (recording)
    return failure;
  Status drained = device_.synchronize();
  if (failure.ok())
    failure = drained;
  return failure;
}

Status Executor::commitUpdates() {
  for (const Result &result : plan_.results) {
    if (!result.updates || !plan_.holds(result.stages) ||
        inPlace_[result.buffer] >= 0)
      continue;
    TRELLIS_RETURN_IF_ERROR(
        device_.copy(buffers_[result.buffer], argument(*result.updates)));
  }
  return Status::success();
}

Status Executor::readArgument(size_t index, void *host) const {
  return device_.copyToHost(argument(index), host);
}

Status Executor::readResult(size_t index, void *host) const {
  return device_.copyToHost(result(index), host);
}

Status Executor::writeArgument(size_t index, const void *host) {
  return device_.copyFromHost(host, argument(index));
}

namespace {

/// Host f32 values of `tensor`'s bytes `raw`, or an error for i32 buffers.
Status toValues(const Tensor &tensor, const std::vector<uint16_t> &raw,
                float *values) {
  int64_t n = tensor.size();
  switch (tensor.desc().dtype) {
  case DType::BF16:
    for (int64_t i = 0; i < n; ++i)
      values[i] = bfloat16ToFloat(raw[i]);
    return Status::success();
  case DType::F16:
    for (int64_t i = 0; i < n; ++i)
      values[i] = halfToFloat(raw[i]);
    return Status::success();
  default:
    return Status::error("expected a float buffer, found " +
                         std::string(dtypeName(tensor.desc().dtype)));
  }
}

} // namespace

Status Executor::readValues(const Tensor &tensor, float *values) const {
  if (tensor.desc().dtype == DType::F32)
    return device_.copyToHost(tensor, values);
  std::vector<uint16_t> raw(tensor.size());
  TRELLIS_RETURN_IF_ERROR(device_.copyToHost(tensor, raw.data()));
  return toValues(tensor, raw, values);
}

Status Executor::readArgumentValues(size_t index, float *values) const {
  return readValues(argument(index), values);
}

Status Executor::readResultValues(size_t index, float *values) const {
  return readValues(result(index), values);
}

Status Executor::writeArgumentValues(size_t index, const float *values) {
  Tensor &tensor = argument(index);
  DType dtype = tensor.desc().dtype;
  if (dtype == DType::F32)
    return device_.copyFromHost(values, tensor);
  if (dtype != DType::BF16 && dtype != DType::F16)
    return Status::error("expected a float buffer, found " +
                         std::string(dtypeName(dtype)));
  std::vector<uint16_t> raw(tensor.size());
  for (size_t i = 0; i < raw.size(); ++i)
    raw[i] = dtype == DType::BF16 ? floatToBfloat16(values[i])
                                  : floatToHalf(values[i]);
  return device_.copyFromHost(raw.data(), tensor);
}

StatusOr<float> Executor::loss() const {
  const Tensor &loss = result(0);
  if (loss.desc().dtype != DType::F32 || loss.size() != 1)
    return Status::error("the plan's first result is not an f32 loss");
  float value = 0;
  TRELLIS_RETURN_IF_ERROR(device_.copyToHost(loss, &value));
  return value;
}

} // namespace trellis::runtime
