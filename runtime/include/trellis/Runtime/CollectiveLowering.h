//===- CollectiveLowering.h - Plan collectives on any backend ---*- C++ -*-===//
//
// The layout semantics of each collective instruction (which dimension is
// gathered, scattered, split, concatenated) mapped onto the flat exchanges
// of a Communicator, written once for every backend: a backend gives the
// moves of its memory (CollectiveMemory: scratch, copies, strided row
// copies, an elementwise reduction) and its communicator the exchanges.
// Buffers move as bytes, so every dtype is handled alike.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_COLLECTIVELOWERING_H
#define TRELLIS_RUNTIME_COLLECTIVELOWERING_H

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/HostReduction.h"

#include <memory>

namespace trellis::runtime {

/// The memory moves a backend gives the lowering, on its own memory (host
/// memory on the CPU; device memory, in stream order, on a GPU).
class CollectiveMemory {
public:
  virtual ~CollectiveMemory() = default;
  /// Scratch of `bytes` bytes (contents undefined), alive as long as the
  /// allocation.
  virtual StatusOr<std::unique_ptr<DeviceAllocation>>
  scratch(int64_t bytes) = 0;
  /// `rows` rows of `rowBytes` bytes each from `source`, whose rows start
  /// `sourceStride` bytes apart, to `target`, whose rows start
  /// `targetStride` bytes apart. One row is a plain copy.
  virtual Status copyRows(void *target, int64_t targetStride,
                          const void *source, int64_t sourceStride,
                          int64_t rowBytes, int64_t rows) = 0;
  /// target[i] = a[i] (kind) b[i] for `count` elements of `dtype`; 16-bit
  /// values combine in fp32 and round to nearest even (HostReduction.h).
  /// `target` may be `a`.
  virtual Status reduce(DType dtype, ReduceKind kind, void *target,
                        const void *a, const void *b, int64_t count) = 0;
};

/// Runs collective instruction `args` (all_reduce, all_gather,
/// reduce_scatter, all_to_all, broadcast, collective_permute, send, recv,
/// slice_shard) over the group along `args.axes` with `args.comm`, packing
/// around the communicator's flat exchanges with `memory`. A reduce_scatter
/// is an all-to-all of the pieces and a reduction in group order, so every
/// member sums alike. Precondition: validated.
Status runCollective(const KernelArgs &args, CollectiveMemory &memory);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_COLLECTIVELOWERING_H
