//===- RunStages.h - Each stage of a loaded plan run once -------*- C++ -*-===//
//
// What both plan fuzzers do with a plan that loaded: run each stage once
// on `device` without peers (transfers fail cleanly), so that a gap in the
// loader's checks shows as a crash in a kernel. Plans whose buffers hold
// more than `maxElements` are skipped, keeping each input cheap.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_FUZZ_RUNSTAGES_H
#define TRELLIS_RUNTIME_FUZZ_RUNSTAGES_H

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Plan.h"

namespace trellis::runtime {

inline void runEachStage(const Plan &plan, Device &device,
                         int64_t maxElements) {
  int64_t elements = 0;
  for (const BufferDesc &buffer : plan.buffers)
    elements += buffer.numElements();
  if (elements > maxElements)
    return;
  for (size_t stage = 0; stage < plan.stages.size(); ++stage) {
    Plan staged = plan;
    selectStage(staged, static_cast<int64_t>(stage));
    StatusOr<std::unique_ptr<Executor>> executor =
        Executor::create(std::move(staged), device);
    if (executor.ok())
      (void)(*executor)->run();
  }
}

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_FUZZ_RUNSTAGES_H
