//===- BucketShards.h - Fused reduce_scatters and all_gathers ---*- C++ -*-===//

#ifndef TRELLIS_LIB_SHARDING_BUCKETSHARDS_H
#define TRELLIS_LIB_SHARDING_BUCKETSHARDS_H

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"

namespace trellis::sharding {

/// Fuses the reduce_scatters and the all_gathers of `body` that split
/// dimension 0 over the same axes (same kind and element type; with
/// `perPart` (a pipeline splits the step later: collectives of no model
/// part stay alone) or `ofMicroBatches`, the same phase and part) into
/// buckets of about `bucketBytes`: a scatter bucket after its last operand
/// is made, a gather bucket where its first member was, as long as every
/// member's result is read after that. Gather buckets, and scatter
/// buckets of the backward (ZeRO-2 and 3), always stay within one phase
/// and part.
void bucketShardCollectives(mlir::Block &body, int64_t bucketBytes,
                            bool perPart, bool ofMicroBatches);

/// Replaces `bucket` (reduce_scatters when `scatters`, else all_gathers) by
/// one collective over the members' rows.
void emitShardBucket(llvm::ArrayRef<mlir::Operation *> bucket, bool scatters,
                     const llvm::DenseMap<mlir::Operation *, int64_t> &position);

} // namespace trellis::sharding

#endif // TRELLIS_LIB_SHARDING_BUCKETSHARDS_H
