//===- HostCollectives.h - Exchanges of host values between ranks -*- C++
//-*-===//
//
// The trainer's exchanges of values it holds in host memory (the loss, the
// finiteness and norm figures, checkpoint shards, memory figures), through
// the rank's Communicator whatever memory that works on: directly where the
// device's memory is host memory, else staged through device buffers on the
// device's streams (copied in, exchanged through enqueueCommunication,
// waited for, copied out), so a stream-ordered communicator (NCCL) serves
// them like Gloo.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_HOSTCOLLECTIVES_H
#define TRELLIS_RUNTIME_HOSTCOLLECTIVES_H

#include "trellis/Runtime/Backend.h"

namespace trellis::runtime {

/// In place: `values` (`count` f32 in host memory) become the reduction
/// over the group along `axes`.
Status allReduceHostValues(Device &device, Communicator &comm,
                           const AxisList &axes, float *values, int64_t count,
                           ReduceKind kind);

/// `output` (count × group size f32 in host memory) receives every
/// member's `input` (count), in group order.
Status allGatherHostValues(Device &device, Communicator &comm,
                           const AxisList &axes, const float *input,
                           float *output, int64_t count);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_HOSTCOLLECTIVES_H
