//===- Resharding.h - The partitioner's decisions, as data ------*- C++ -*-===//
//
// What the partitioner decides for a propagated step, without building any
// IR: the layout each op runs in (the axes of its factors, the sharding its
// operands are brought to, the one its results come out with), and the
// steps (collectives, pads, slices) that bring a value from one sharding to
// another. The partitioner emits the steps as ops; the cost query
// (ShardingCost.h) counts them. Both read these functions, so the counted
// collectives are the emitted ones.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_SHARDING_RESHARDING_H
#define TRELLIS_LIB_SHARDING_RESHARDING_H

#include "ValueSharding.h"

namespace trellis::sharding {

/// The layout one op is partitioned in.
struct OpLayout {
  /// The mesh axes of each factor of the op's rule.
  llvm::SmallVector<AxisNames> factorAxes;
  /// The sharding each operand must have (partial where the op keeps a
  /// linear partial sum).
  llvm::SmallVector<ValueSharding> operands;
  /// The splits of each operand's dimensions (the projection of the
  /// factors, never partial): what attributes that depend on the rank's
  /// place read.
  llvm::SmallVector<ValueSharding> operandSplits;
  /// The sharding each result comes out with.
  llvm::SmallVector<ValueSharding> results;
};

/// Decides how an op with `rule` is partitioned, given its operands as they
/// are (`operands`; `fixed[i]` when a user or preset laid operand i out: an
/// argument or a constraint's result) and its results as propagation
/// decided (`results`). The results' factors are decided first; operands
/// decide only the factors no result has (contractions, reductions), the
/// fixed ones first, each taking the longest leading run of its axes that no
/// other factor holds.
OpLayout decideOpLayout(const graph::ShardingRule &rule,
                        llvm::ArrayRef<ValueSharding> operands,
                        llvm::ArrayRef<bool> fixed,
                        llvm::ArrayRef<ValueSharding> results, MeshAttr mesh);

/// The sharding a result the op made as `made` ends up with when
/// propagation wanted `wanted`: `wanted`, partial only over the axes the op
/// left it partial (a value made whole cannot become a partial sum again).
ValueSharding achievedSharding(const ValueSharding &made,
                               const ValueSharding &wanted);

/// One step of a reshard, on the local value the previous step left.
struct ReshardStep {
  enum class Kind {
    AllReduce,     // over `axes`, combining by `reduction`
    ReduceScatter, // over `axes`, scattering dimension `dim`
    AllGather,     // over `axes`, gathering dimension `dim`
    AllToAll,      // over `axes`: splits `dim`, concatenates `concatDim`
    SliceShard,    // keeps this rank's piece of `dim` over `axes`
    Pad,           // zeros appended to `dim` (graph.pad)
    Slice,         // `dim` cut back to its size (graph.slice)
  };
  Kind kind;
  AxisNames axes;
  int64_t dim = 0;
  int64_t concatDim = 0;
  ReductionKind reduction = ReductionKind::Sum;
  /// The local shape after the step.
  llvm::SmallVector<int64_t> shape;
};

/// The steps that turn a local value of shape `shape`, sharded as `actual`
/// (a piece of a value of shape `global`), into one sharded as `required`,
/// in order:
/// 1. partial values: a reduce_scatter where the requirement appends exactly
///    that axis to a dimension, an all_reduce for the rest;
/// 2. splits the requirement does not start with undone, minor axis first:
///    moved to the dimension that wants it next (all_to_all), else gathered;
/// 3. splits still missing added: each rank keeps its piece (slice_shard).
/// A dimension one axis splits unevenly is padded with zeros before it is
/// scattered or sliced, and cut back to its size after it is gathered.
llvm::SmallVector<ReshardStep>
planReshard(MeshAttr mesh, llvm::ArrayRef<int64_t> shape, ValueSharding actual,
            const ValueSharding &required, llvm::ArrayRef<int64_t> global);

} // namespace trellis::sharding

#endif // TRELLIS_LIB_SHARDING_RESHARDING_H
