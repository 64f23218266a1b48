//===- PlanLoaderFuzzer.cpp - libFuzzer target for the plan loader --------===//
//
// Feeds arbitrary bytes to parsePlan; every stage of a plan that loads is
// executed once (without peers: transfers fail cleanly), so that validation
// gaps show up as crashes in kernels. Build with scripts/fuzz.sh.
//
//===----------------------------------------------------------------------===//

#include "RunStages.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace trellis::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  StatusOr<Plan> plan =
      parsePlan(std::string_view(reinterpret_cast<const char *>(data), size));
  if (!plan.ok())
    return 0;
  static std::unique_ptr<Device> device =
      std::move(*(*findBackend("cpu"))->createDevice({}));
  runEachStage(*plan, *device, int64_t(1) << 22);
  return 0;
}
