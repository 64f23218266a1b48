//===- HostMemory.h - Memory this host can still give -----------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_CPU_HOSTMEMORY_H
#define TRELLIS_RUNTIME_CPU_HOSTMEMORY_H

#include "trellis/Runtime/Backend.h"

namespace trellis::runtime::cpu {

/// A rank's budget of host memory: the kernel's MemAvailable (and, under a
/// cgroup v2 memory.max, what the cgroup has left, if less), divided among
/// `options.ranksOnNode` ranks, then capped by `options.maxMemoryBytes`.
MemoryBudget hostMemoryBudget(const DeviceOptions &options);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_HOSTMEMORY_H
