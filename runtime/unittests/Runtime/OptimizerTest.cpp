//===- OptimizerTest.cpp - Multi-tensor optimizer updates -----------------===//
//
// A run of adamw and sgd instructions executes as one multi-tensor pass;
// its results must be those of the same updates run one by one (here: the
// same plan with an unrelated instruction between the updates, which keeps
// them apart), bit for bit, at 1 and 2 threads.
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace trellis::runtime {
namespace {

/// Sizes of the updated parameters: one of several chunks, small ones.
const std::vector<int64_t> kSizes = {40000, 7, 1000, 16384};

/// loss = sum of every parameter; an adamw update per parameter (its
/// gradient: the parameter itself) and an sgd update of the last; with
/// `apart`, a scale of the loss between consecutive updates.
std::string updatePlan(bool apart) {
  std::string buffers, arguments, results, program, gaps;
  int64_t count = static_cast<int64_t>(kSizes.size());
  // Buffers: params [0, n), m [n, 2n), v [2n, 3n), step 3n, loss 3n+1,
  // partial sums [3n+2, 4n+2), then the updates' (and scales') outputs.
  auto add = [&](const std::string &shape) {
    buffers += (buffers.empty() ? "" : ", ") + std::string("{\"shape\": ") +
               shape + ", \"dtype\": \"f32\"}";
  };
  for (int role = 0; role < 3; ++role)
    for (int64_t size : kSizes)
      add("[" + std::to_string(size) + "]");
  add("[]");
  add("[]");
  for (int64_t i = 0; i < count; ++i)
    add("[]");
  int64_t step = 3 * count, loss = step + 1, partial = loss + 1,
          next = partial + count;
  for (int64_t i = 0; i < count; ++i) {
    std::string name = "\"p" + std::to_string(i) + "\"";
    arguments += (i ? ", " : "") + std::string("{\"buffer\": ") +
                 std::to_string(i) + ", \"role\": \"param\", \"param\": " +
                 name + ", \"init\": \"normal:0.5\"}, {\"buffer\": " +
                 std::to_string(count + i) + ", \"role\": \"adam_m\", " +
                 "\"param\": " + name + ", \"init\": \"normal:0.1\"}, " +
                 "{\"buffer\": " + std::to_string(2 * count + i) +
                 ", \"role\": \"adam_v\", \"param\": " + name +
                 ", \"init\": \"ones\"}";
    program += "{\"op\": \"reduce_sum\", \"inputs\": [" + std::to_string(i) +
               "], \"outputs\": [" + std::to_string(partial + i) +
               "], \"attrs\": {\"dims\": [0]}}, ";
  }
  arguments += ", {\"buffer\": " + std::to_string(step) + ", \"role\": \"step\"}";
  std::string sum = std::to_string(partial);
  program += "{\"op\": \"add\", \"inputs\": [" + sum + ", " +
             std::to_string(partial + 1) + "], \"outputs\": [" +
             std::to_string(loss) + "], \"attrs\": {}}";
  results = "{\"buffer\": " + std::to_string(loss) + ", \"role\": \"loss\"}";
  for (int64_t i = 0; i < count; ++i) {
    int64_t out = next;
    next += 3;
    add("[" + std::to_string(kSizes[i]) + "]");
    add("[" + std::to_string(kSizes[i]) + "]");
    add("[" + std::to_string(kSizes[i]) + "]");
    program += ", {\"op\": \"adamw\", \"inputs\": [" + std::to_string(i) +
               ", " + std::to_string(i) + ", " + std::to_string(count + i) +
               ", " + std::to_string(2 * count + i) + ", " +
               std::to_string(step) + "], \"outputs\": [" +
               std::to_string(out) + ", " + std::to_string(out + 1) + ", " +
               std::to_string(out + 2) +
               "], \"attrs\": {\"learning_rate\": 0.01, \"beta1\": 0.9, "
               "\"beta2\": 0.999, \"epsilon\": 1e-8, \"weight_decay\": " +
               std::string(i % 2 ? "0.1" : "0.0") + "}}";
    if (apart && i + 1 < count) {
      // Its own output, returned (a plan writes each buffer once).
      add("[]");
      int64_t gap = next++;
      program += ", {\"op\": \"scale\", \"inputs\": [" +
                 std::to_string(loss) + "], \"outputs\": [" +
                 std::to_string(gap) + "], \"attrs\": {\"factor\": 2.0}}";
      gaps += ", {\"buffer\": " + std::to_string(gap) + "}";
    }
    results += ", {\"buffer\": " + std::to_string(out) + "}";
  }
  // An sgd update of parameter 0 as well (its own result buffer).
  add("[" + std::to_string(kSizes[0]) + "]");
  program += ", {\"op\": \"sgd\", \"inputs\": [0, 0], \"outputs\": [" +
             std::to_string(next) +
             "], \"attrs\": {\"learning_rate\": 0.1, \"weight_decay\": 0.01}}";
  results += ", {\"buffer\": " + std::to_string(next) + "}";
  results += gaps;
  return "{\"format\": \"trellis-plan\", \"version\": 4, \"mesh\": "
         "[{\"name\": \"dp\", \"size\": 1}], \"buffers\": [" +
         buffers + "], \"arguments\": [" + arguments + "], \"results\": [" +
         results + "], \"stages\": [{\"stage\": 0, \"programs\": [{\"name\": "
         "\"step\", \"program\": [" +
         program + "]}], \"schedule\": [\"step\"]}]}";
}

/// Every update result of one step of the plan, at `threads` threads, on
/// a device of `backend`.
std::vector<std::vector<float>> runUpdates(bool apart, int threads,
                                           const std::string &backend) {
  StatusOr<Plan> plan = parsePlan(updatePlan(apart));
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok())
    return {};
  DeviceOptions options;
  options.threads = threads;
  std::unique_ptr<Device> device =
      std::move(*(*findBackend(backend))->createDevice(options));
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(*plan), *device);
  EXPECT_TRUE(executor.ok()) << executor.status().message();
  Executor &run = **executor;
  // Deterministic values: a pattern per argument.
  for (size_t a = 0; a < run.plan().arguments.size(); ++a) {
    std::vector<float> values(run.argument(a).size());
    for (size_t k = 0; k < values.size(); ++k)
      values[k] = run.plan().arguments[a].role == ArgumentRole::Step
                      ? 3.0f
                      : 0.5f + std::sin(0.37f * k + a);
    if (run.plan().arguments[a].role == ArgumentRole::AdamV)
      for (float &value : values)
        value = value * value;
    EXPECT_TRUE(run.writeArgumentValues(a, values.data()).ok());
  }
  EXPECT_TRUE(run.run().ok());
  std::vector<std::vector<float>> out;
  for (size_t r = 1; r < run.plan().results.size(); ++r) {
    if (run.result(r).size() == 1)
      continue; // a scale's output
    std::vector<float> values(run.result(r).size());
    EXPECT_TRUE(run.readResultValues(r, values.data()).ok());
    out.push_back(std::move(values));
  }
  return out;
}

class OptimizerTest : public testing::EveryBackend {};
TRELLIS_ON_EVERY_BACKEND(OptimizerTest);

TEST_P(OptimizerTest, AMultiTensorPassEqualsTheUpdatesOneByOne) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    std::vector<std::vector<float>> together = runUpdates(false, threads, GetParam());
    std::vector<std::vector<float>> apart = runUpdates(true, threads, GetParam());
    ASSERT_EQ(together.size(), kSizes.size() + 1);
    ASSERT_EQ(together.size(), apart.size());
    for (size_t r = 0; r < together.size(); ++r)
      for (size_t k = 0; k < together[r].size(); ++k)
        ASSERT_EQ(together[r][k], apart[r][k]) << "result " << r << " [" << k
                                               << "]";
  }
}

} // namespace
} // namespace trellis::runtime
