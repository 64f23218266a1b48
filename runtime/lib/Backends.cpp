//===- Backends.cpp - The backends this runtime was built with ------------===//
//
// The one list of backends: a new backend adds its line here. Also the
// Device interface's default methods.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"

#include "../cpu/CpuBackend.h"

namespace trellis::runtime {

StatusOr<bool> Device::allFinite(const Tensor &tensor) {
  std::vector<char> host(tensor.bytes());
  TRELLIS_RETURN_IF_ERROR(copyToHost(tensor, host.data()));
  return allFiniteValues(tensor.desc().dtype, host.data(), tensor.size());
}

const std::vector<const Backend *> &registeredBackends() {
  static const std::vector<const Backend *> backends = {&cpu::backend()};
  return backends;
}

StatusOr<const Backend *> findBackend(const std::string &name) {
  std::string names;
  for (const Backend *backend : registeredBackends()) {
    if (backend->name() == name)
      return backend;
    names += (names.empty() ? "" : ", ") + backend->name();
  }
  return Status::error("unknown device '" + name + "': this runtime has " +
                       names);
}

} // namespace trellis::runtime
