//===- ExecutorTest.cpp - Action programs replayed per micro-batch --------===//

#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Plan.h"

#include "Runtime/ForwardingDevice.h"
#include "Runtime/TestPlans.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

using namespace trellis::runtime;
using trellis::runtime::testplans::kMicroBatchPlan;

namespace {

/// The CPU device, recording what the executor prepares and launches.
class RecordingDevice : public ForwardingDevice {
public:
  using ForwardingDevice::ForwardingDevice;

  /// Instructions prepared, by op.
  std::map<std::string, int> prepared;
  /// Per launch: the op, the instruction object, and the tensor its first
  /// output names.
  struct Launch {
    std::string op;
    const Instruction *instruction;
    const Tensor *output;
    bool hasPrepared;
  };
  std::vector<Launch> launches;

  StatusOr<std::unique_ptr<PreparedLaunch>>
  prepare(const KernelArgs &args) override {
    ++prepared[args.instruction.op];
    return ForwardingDevice::prepare(args);
  }
  Status launch(const KernelArgs &args) override {
    launches.push_back({args.instruction.op, &args.instruction, &args.out(0),
                        args.prepared != nullptr});
    return ForwardingDevice::launch(args);
  }
};

std::unique_ptr<RecordingDevice> recordingCpuDevice() {
  return std::make_unique<RecordingDevice>(ForwardingDevice::cpu());
}

TEST(ExecutorTest, PreparesEachInstructionOfAProgramOnce) {
  StatusOr<Plan> plan = parsePlan(kMicroBatchPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::unique_ptr<RecordingDevice> device = recordingCpuDevice();
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(*plan), *device);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  // Three runs of one program of three instructions: three preparations.
  EXPECT_EQ(device->prepared,
            (std::map<std::string, int>{
                {"accumulate", 1}, {"matmul", 1}, {"reduce_sum", 1}}));
}

TEST(ExecutorTest, ReplaysTheProgramOverEachMicroBatchsBuffers) {
  StatusOr<Plan> plan = parsePlan(kMicroBatchPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::unique_ptr<RecordingDevice> device = recordingCpuDevice();
  StatusOr<std::unique_ptr<Executor>> created =
      Executor::create(std::move(*plan), *device);
  ASSERT_TRUE(created.ok()) << created.status().message();
  Executor &executor = **created;
  std::vector<float> a(6, 1.0f), b(12, 0.5f);
  ASSERT_TRUE(executor.writeArgumentValues(0, a.data()).ok());
  ASSERT_TRUE(executor.writeArgumentValues(1, b.data()).ok());
  for (int step = 0; step < 2; ++step) {
    device->launches.clear();
    ASSERT_TRUE(executor.run().ok());
    // Each micro-batch adds sum(a @ b) = 2 * 4 * 3 * 0.5.
    EXPECT_FLOAT_EQ(*executor.loss(), 3 * 12.0f);
    ASSERT_EQ(device->launches.size(), 9u);
    const auto &runs = device->launches;
    for (size_t i = 0; i < runs.size(); ++i)
      EXPECT_TRUE(runs[i].hasPrepared) << i;
    // Every run executes the program's own matmul, over its micro-batch's
    // copy of the product.
    EXPECT_EQ(runs[0].op, "matmul");
    EXPECT_EQ(runs[0].instruction, runs[3].instruction);
    EXPECT_EQ(runs[3].instruction, runs[6].instruction);
    EXPECT_NE(runs[0].output, runs[3].output);
    EXPECT_NE(runs[3].output, runs[6].output);
    // Micro-batch 0's accumulate starts the total (the run's amendment);
    // the others add to the one total with the program's instruction.
    EXPECT_EQ(runs[2].op, "accumulate");
    EXPECT_TRUE(runs[2].instruction->flag("first"));
    EXPECT_FALSE(runs[5].instruction->flag("first"));
    EXPECT_NE(runs[2].instruction, runs[5].instruction);
    EXPECT_EQ(runs[5].instruction, runs[8].instruction);
    EXPECT_EQ(runs[2].output, runs[8].output);
  }
}

/// The CPU device as a device that records steps: between beginRecording
/// and endRecording it keeps what the executor issues as a script, and a
/// replay runs the script (as a CUDA graph replays its kernels).
class ScriptingDevice : public ForwardingDevice {
public:
  using ForwardingDevice::ForwardingDevice;

  /// An op the device says it cannot record ("" : none).
  std::string unrecordableOp;
  /// Whether endRecording fails (as a capture of a call that cannot be
  /// captured does).
  bool failRecording = false;
  int recordings = 0, replays = 0, eagerLaunches = 0;

  bool recordsSteps() const override { return true; }
  bool recordable(const KernelArgs &args) const override {
    return args.instruction.op != unrecordableOp;
  }
  Status beginRecording() override {
    ++recordings;
    script_.clear();
    tickets_.clear();
    recording_ = true;
    return Status::success();
  }
  StatusOr<std::unique_ptr<RecordedStep>> endRecording() override {
    recording_ = false;
    if (failRecording)
      return Status::error("a call that cannot be recorded");
    auto step = std::make_unique<Script>();
    step->work = std::move(script_);
    return std::unique_ptr<RecordedStep>(std::move(step));
  }
  Status replay(const RecordedStep &step) override {
    ++replays;
    for (const std::function<Status()> &work :
         static_cast<const Script &>(step).work)
      if (Status status = work(); !status.ok())
        return status;
    return Status::success();
  }

  Status launch(const KernelArgs &args) override {
    if (!recording_)
      ++eagerLaunches;
    return issue([this, args] { return ForwardingDevice::launch(args); });
  }
  Status launchUpdates(const std::vector<KernelArgs> &updates) override {
    return issue(
        [this, updates] { return ForwardingDevice::launchUpdates(updates); });
  }
  Status runCollective(const KernelArgs &args) override {
    return issue(
        [this, args] { return ForwardingDevice::runCollective(args); });
  }
  int64_t enqueueCommunication(std::function<Status()> work) override {
    if (!recording_)
      return ForwardingDevice::enqueueCommunication(std::move(work));
    // A ticket of the recording, bound to the device's at each replay.
    int64_t ticket = static_cast<int64_t>(tickets_.size());
    tickets_.push_back(-1);
    script_.push_back([this, work, ticket] {
      tickets_[ticket] = ForwardingDevice::enqueueCommunication(work);
      return Status::success();
    });
    return ticket;
  }
  Status waitCommunication(int64_t event) override {
    return issue([this, event, recorded = recording_] {
      return ForwardingDevice::waitCommunication(recorded ? tickets_[event]
                                                          : event);
    });
  }

private:
  struct Script : RecordedStep {
    std::vector<std::function<Status()>> work;
  };
  /// Runs `work` now, or keeps it for the replays while recording.
  Status issue(std::function<Status()> work) {
    if (!recording_)
      return work();
    script_.push_back(std::move(work));
    return Status::success();
  }
  bool recording_ = false;
  std::vector<std::function<Status()>> script_;
  std::vector<int64_t> tickets_;
};

/// Runs kMicroBatchPlan for `steps` steps on `device`, the parameters
/// changed between steps (a replay must read them anew); returns the
/// losses, and sets `obstacle` to the executor's stepRecordingObstacle()
/// after them.
std::vector<float> microBatchLosses(Device &device, bool recording, int steps,
                                    std::string *obstacle = nullptr) {
  StatusOr<Plan> plan = parsePlan(kMicroBatchPlan);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  StatusOr<std::unique_ptr<Executor>> created =
      Executor::create(std::move(*plan), device);
  EXPECT_TRUE(created.ok()) << created.status().message();
  Executor &executor = **created;
  executor.setStepRecording(recording);
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> a(6, 1.0f + step), b(12, 0.5f * (step + 1));
    EXPECT_TRUE(executor.writeArgumentValues(0, a.data()).ok());
    EXPECT_TRUE(executor.writeArgumentValues(1, b.data()).ok());
    EXPECT_TRUE(executor.run().ok());
    losses.push_back(*executor.loss());
  }
  if (obstacle)
    *obstacle = executor.stepRecordingObstacle();
  return losses;
}

TEST(ExecutorTest, CountsEachOpsFlopsOfAStep) {
  StatusOr<Plan> plan = parsePlan(kMicroBatchPlan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::unique_ptr<Device> cpu = ForwardingDevice::cpu();
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(*plan), *cpu);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  std::map<std::string, double> flops = (*executor)->stepFlops();
  // Three micro-batches of a [2, 3] x [3, 4] product: 3 * 2 * 2 * 3 * 4.
  EXPECT_EQ(flops["matmul"], 144);
  EXPECT_GT(flops["reduce_sum"], 0);
}

TEST(ExecutorTest, RecordsTheSecondStepAndReplaysItAfterwards) {
  std::vector<float> eager = microBatchLosses(*ForwardingDevice::cpu(),
                                              /*recording=*/false, 4);
  // Each micro-batch adds sum(a @ b) = (1 + s) * 0.5 (s + 1) * 3 * 8.
  EXPECT_FLOAT_EQ(eager[3], 3 * 4 * 2.0f * 3 * 8);
  ScriptingDevice device(ForwardingDevice::cpu());
  std::string obstacle;
  EXPECT_EQ(microBatchLosses(device, /*recording=*/true, 4, &obstacle), eager);
  EXPECT_EQ(obstacle, "");
  // Step 1 runs eagerly (9 launches), step 2 is recorded and replayed,
  // steps 3 and 4 replay.
  EXPECT_EQ(device.eagerLaunches, 9);
  EXPECT_EQ(device.recordings, 1);
  EXPECT_EQ(device.replays, 3);
}

TEST(ExecutorTest, ARankAloneRunsEagerlyWhenTheRecordingFails) {
  std::vector<float> eager = microBatchLosses(*ForwardingDevice::cpu(),
                                              /*recording=*/false, 4);
  ScriptingDevice device(ForwardingDevice::cpu());
  device.failRecording = true;
  std::string obstacle;
  // The step whose recording fails runs, eagerly, all the same; so do the
  // later ones.
  EXPECT_EQ(microBatchLosses(device, /*recording=*/true, 4, &obstacle), eager);
  EXPECT_EQ(device.recordings, 1);
  EXPECT_EQ(device.replays, 0);
  EXPECT_EQ(obstacle,
            "recording the step failed: a call that cannot be recorded");
}

TEST(ExecutorTest, RunsEagerlyWhatTheDeviceCannotRecord) {
  ScriptingDevice device(ForwardingDevice::cpu());
  device.unrecordableOp = "reduce_sum";
  std::string obstacle;
  std::vector<float> losses =
      microBatchLosses(device, /*recording=*/true, 3, &obstacle);
  EXPECT_EQ(obstacle, "program forward.c0 instruction 1 (reduce_sum) waits "
                      "on the host for a value of the step");
  EXPECT_EQ(device.recordings, 0);
  EXPECT_EQ(device.eagerLaunches, 27);
  EXPECT_FLOAT_EQ(losses[2], 3 * 3 * 1.5f * 3 * 8);
  // Off, or on a device that records nothing: said why.
  EXPECT_EQ(microBatchLosses(device, /*recording=*/false, 1, &obstacle).size(),
            1u);
  EXPECT_EQ(obstacle, "step recording is off");
  std::unique_ptr<Device> cpu = ForwardingDevice::cpu();
  microBatchLosses(*cpu, /*recording=*/true, 1, &obstacle);
  EXPECT_EQ(obstacle, "the cpu device records no steps");
  EXPECT_EQ(cpu->beginRecording().message(), "cpu devices record no steps");
}

} // namespace
