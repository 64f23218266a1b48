//===- TestPlans.h - Small plans the runtime's tests share ------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_UNITTESTS_RUNTIME_TESTPLANS_H
#define TRELLIS_RUNTIME_UNITTESTS_RUNTIME_TESTPLANS_H

namespace trellis::runtime::testplans {

/// One stage, three micro-batches: each adds sum(a @ b) to the loss.
inline const char *const kMicroBatchPlan = R"({
  "format": "trellis-plan", "version": 4, "micro_batches": 3,
  "mesh": [{"name": "dp", "size": 1}],
  "buffers": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [3, 4], "dtype": "f32"},
              {"shape": [2, 4], "dtype": "f32", "micro_batch": true},
              {"shape": [], "dtype": "f32", "micro_batch": true},
              {"shape": [], "dtype": "f32"}],
  "arguments": [{"buffer": 0, "role": "param", "param": "a", "init": "ones"},
                {"buffer": 1, "role": "param", "param": "b", "init": "ones"}],
  "results": [{"buffer": 4, "role": "loss"}],
  "stages": [{"stage": 0, "programs": [
    {"name": "forward.c0", "program": [
      {"op": "matmul", "inputs": [0, 1], "outputs": [2], "attrs": {}},
      {"op": "reduce_sum", "inputs": [2], "outputs": [3], "attrs": {"dims": [0, 1]}},
      {"op": "accumulate", "inputs": [3], "outputs": [4]}]}],
    "schedule": ["F0", "F1", "F2"]}]
})";

} // namespace trellis::runtime::testplans

#endif // TRELLIS_RUNTIME_UNITTESTS_RUNTIME_TESTPLANS_H
