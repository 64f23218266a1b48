//===- HostMemory.cpp - Memory this host can still give -------------------===//

#include "HostMemory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace trellis::runtime::cpu {

namespace {

/// /proc/meminfo's MemAvailable in bytes, or -1.
int64_t memAvailable() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:")
      return kib * 1024;
  return -1;
}

/// What this process's cgroup (v2) may still charge, or -1 without a
/// limit.
int64_t cgroupRemaining() {
  std::ifstream limitFile("/sys/fs/cgroup/memory.max");
  std::ifstream currentFile("/sys/fs/cgroup/memory.current");
  std::string limit;
  int64_t current = 0;
  if (!(limitFile >> limit) || limit == "max" || !(currentFile >> current))
    return -1;
  int64_t bytes = std::stoll(limit);
  return bytes > current ? bytes - current : 0;
}

/// What `ulimit -v` (RLIMIT_AS) leaves this process of address space, or
/// -1 without a limit: an allocation past it fails however much memory
/// the host has.
int64_t addressSpaceRemaining() {
  rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return -1;
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  if (!(statm >> pages))
    return -1;
  int64_t used = pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  int64_t cap = static_cast<int64_t>(limit.rlim_cur);
  return cap > used ? cap - used : 0;
}

std::string gibibytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", bytes / 1073741824.0);
  return text;
}

} // namespace

MemoryBudget hostMemoryBudget(const DeviceOptions &options) {
  MemoryBudget budget;
  int64_t available = memAvailable();
  std::string source = "MemAvailable " + gibibytes(available);
  if (int64_t cgroup = cgroupRemaining();
      cgroup >= 0 && (available < 0 || cgroup < available)) {
    available = cgroup;
    source = "the cgroup's memory.max leaves " + gibibytes(cgroup);
  }
  if (available >= 0) {
    int64_t ranks = std::max<int64_t>(options.ranksOnNode, 1);
    budget.bytes = available / ranks;
    budget.source =
        ranks > 1 ? source + " shared by " + std::to_string(ranks) +
                        " ranks on this node"
                  : source;
  }
  // The address space is this process's own, not shared by the ranks.
  if (int64_t space = addressSpaceRemaining();
      space >= 0 && (budget.bytes < 0 || space < budget.bytes)) {
    budget.bytes = space;
    budget.source = "ulimit -v (RLIMIT_AS) leaves " + gibibytes(space) +
                    " of address space";
  }
  if (options.maxMemoryBytes > 0 &&
      (budget.bytes < 0 || options.maxMemoryBytes < budget.bytes)) {
    budget.bytes = options.maxMemoryBytes;
    budget.source = "--max-memory";
  }
  return budget;
}

} // namespace trellis::runtime::cpu
