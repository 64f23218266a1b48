//===- Collectives.h - Plan collectives on a Communicator -------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_COLLECTIVES_H
#define TRELLIS_RUNTIME_COLLECTIVES_H

#include "trellis/Runtime/Communicator.h"
#include "trellis/Runtime/Tensor.h"

namespace trellis::runtime {

/// Executes a collective instruction (all_reduce, all_gather,
/// reduce_scatter, all_to_all, broadcast, collective_permute, send, recv,
/// slice_shard)
/// over the group along `axes`. Precondition: validated.
Status runCollective(const Instruction &instruction, const AxisList &axes,
                     std::vector<Tensor> &buffers, Communicator *comm);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_COLLECTIVES_H
