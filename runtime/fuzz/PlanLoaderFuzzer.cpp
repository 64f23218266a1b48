//===- PlanLoaderFuzzer.cpp - libFuzzer target for the plan loader --------===//
//
// Feeds arbitrary bytes to parsePlan; every stage of a plan that loads is
// executed once (without peers: transfers fail cleanly), so that validation
// gaps show up as crashes in kernels. Build with scripts/fuzz.sh.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Plan.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace trellis::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  StatusOr<Plan> plan =
      parsePlan(std::string_view(reinterpret_cast<const char *>(data), size));
  if (!plan.ok())
    return 0;
  // Keep each input cheap: skip plans whose buffers are large.
  int64_t elements = 0;
  for (const BufferDesc &buffer : plan->buffers)
    elements += buffer.numElements();
  if (elements > (int64_t(1) << 22))
    return 0;
  static std::unique_ptr<Device> device =
      std::move(*(*findBackend("cpu"))->createDevice({}));
  for (size_t stage = 0; stage < plan->stages.size(); ++stage) {
    Plan staged = *plan;
    selectStage(staged, static_cast<int64_t>(stage));
    StatusOr<std::unique_ptr<Executor>> executor =
        Executor::create(std::move(staged), *device);
    if (executor.ok())
      (void)(*executor)->run();
  }
  return 0;
}
