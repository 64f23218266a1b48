//===- SequenceChunks.h - Zigzag sequence order (causal balance) -*- C++ -*-===//
//
// Ring attention with a causal mask balances its work by storing the
// sequence in zigzag order: cut into `chunks` = 2N equal chunks, slot k
// holds chunk k / 2 when k is even and chunk chunks - 1 - k / 2 when k is
// odd. Split into N contiguous pieces (two slots each), rank r then holds
// chunks r and 2N - 1 - r: one early and one late, so every rank's queries
// see the same number of keys. The compiler marks the position-aware ops
// (rotary embeddings, attention, position ids) and the token inputs with
// `chunks`; the data loader stores the batch in this order and the kernels
// read each stored index's position from it. The loss, a sum over
// positions, does not depend on the order.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_SEQUENCECHUNKS_H
#define TRELLIS_COMMON_SEQUENCECHUNKS_H

#include "trellis/Common/HostDevice.h"

#include <cstdint>

namespace trellis {

/// The chunk stored in slot `slot` of `chunks` zigzag slots.
TRELLIS_HOST_DEVICE inline int64_t zigzagChunk(int64_t slot, int64_t chunks) {
  return slot % 2 == 0 ? slot / 2 : chunks - 1 - slot / 2;
}

/// The position in the sequence of stored index `index` of a sequence of
/// `length` tokens kept in zigzag order of `chunks` chunks (`chunks` <= 1:
/// natural order). `chunks` divides `length` (the compiler checks it).
TRELLIS_HOST_DEVICE inline int64_t
sequencePosition(int64_t index, int64_t length, int64_t chunks) {
  if (chunks <= 1)
    return index;
  int64_t chunkLength = length / chunks;
  return zigzagChunk(index / chunkLength, chunks) * chunkLength +
         index % chunkLength;
}

} // namespace trellis

#endif // TRELLIS_COMMON_SEQUENCECHUNKS_H
