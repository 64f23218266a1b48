//===- ExecutorTest.cpp - Action programs replayed per micro-batch --------===//

#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Plan.h"

#include "Runtime/ForwardingDevice.h"
#include "Runtime/TestPlans.h"

#include <gtest/gtest.h>

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

} // namespace
