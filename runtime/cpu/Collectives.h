//===- Collectives.h - Plan collectives on host memory ----------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_CPU_COLLECTIVES_H
#define TRELLIS_RUNTIME_CPU_COLLECTIVES_H

#include "trellis/Runtime/Backend.h"

namespace trellis::runtime::cpu {

/// Executes a collective instruction (all_reduce, all_gather,
/// reduce_scatter, all_to_all, broadcast, collective_permute, send, recv,
/// slice_shard) over the group along `args.axes`, packing host buffers of
/// any dtype around the communicator's flat exchanges. Precondition:
/// validated.
Status runCollective(const KernelArgs &args);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_COLLECTIVES_H
