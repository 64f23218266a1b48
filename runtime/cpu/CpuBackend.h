//===- CpuBackend.h - The host as a device ----------------------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_CPU_CPUBACKEND_H
#define TRELLIS_RUNTIME_CPU_CPUBACKEND_H

#include "trellis/Runtime/Backend.h"

namespace trellis::runtime::cpu {

/// The "cpu" backend: host memory, Trellis kernels over OpenBLAS, Gloo.
const Backend &backend();

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_CPUBACKEND_H
