//===- VirtualStep.h - The partitioned step as data -------------*- C++ -*-===//
//
// What the cost query builds instead of partitioning: the partitioned
// step's ops (the step's own, each on its piece, and the reshards the
// partitioner inserts for them) with the values they read and make, their
// local costs and collectives. Pricing places them on pipeline ranks and
// adds the transfers between ranks.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_SHARDING_VIRTUALSTEP_H
#define TRELLIS_LIB_SHARDING_VIRTUALSTEP_H

#include "Resharding.h"

#include "trellis/Sharding/ShardingCost.h"

#include <set>

namespace trellis::sharding {

/// A value of the partitioned step: an argument's piece, an op's result as
/// partitioned, or a reshard step's.
struct HeldValue {
  /// The op that makes it, or -1 for an argument (number `argument`).
  int64_t producer = -1;
  int64_t argument = -1;
  /// Its local and global shapes, element type and sharding.
  llvm::SmallVector<int64_t> shape, global;
  mlir::Type elementType;
  ValueSharding layout;

  int64_t bytes() const;
};

/// An op of the partitioned step.
struct VirtualOp {
  /// The step's op it is, or that it was inserted for (a reshard step takes
  /// its graph.phase and model part).
  mlir::Operation *origin = nullptr;
  llvm::SmallVector<int64_t> operands, results;
  /// One execution's cost, and its collective ("all_reduce over dp") with
  /// one execution's traffic.
  OpCost cost;
  std::string collective;
  StepReport::Traffic traffic;
  /// Runs in each micro-batch's action (graph.phase, or a total over
  /// micro-batches), on `virtualStage`; else once in the step.
  bool action = false;
  bool accumulates = false;
  int64_t virtualStage = 0;
  /// Its one result carries trellis.layout (a pipelined partition marks the
  /// op or last reshard step that makes each value): a pipeline may send it
  /// in pieces.
  bool laidOut = false;
  /// A reshard step: which one.
  std::optional<ReshardStep> reshardStep;
  /// An attention (or its gradient): the axes its queries' sequence is split
  /// over (the op's `axes` once partitioned).
  AxisNames sequenceAxes;
  /// Replaced by a lowering (ring attention): no longer part of the step.
  bool erased = false;
  /// Made by a lowering: the index of the op it replaces, whose place in
  /// the program it runs at (ops are appended); -1 for the step's own.
  int64_t replaces = -1;
  /// The op-table row it runs (`matmul`, `pad`): empty for collectives and
  /// for reshard steps that keep a piece.
  llvm::StringRef kernel;
  /// A matmul's piece: rows (its batch folded in), columns and depth; an
  /// attention's query and key lengths and head dimension.
  int64_t gemmRows = 0, gemmColumns = 0, gemmDepth = 0;
};

struct VirtualStep {
  std::vector<HeldValue> values;
  std::vector<VirtualOp> ops;
  /// The values of the step's arguments, and of its results.
  llvm::SmallVector<int64_t> arguments, results;
};

/// Replaces each attention in the all-gather form (keys and values gathered
/// along the sequence over the queries' axes) by the ring
/// -trellis-lower-ring-attention makes of it: blocks passed on by
/// collective_permute, attention_block and attention_merge steps, and in
/// the backward attention_block_grad steps whose key and value gradients
/// ride home with their blocks instead of being reduce-scattered.
void lowerRingAttention(VirtualStep &virtualStep, MeshAttr mesh);

/// Each pipeline rank's share of `virtualStep`, written down from `step`
/// (its attributes say the micro-batches and the pipeline's cut; `mesh`:
/// null for a step on one rank).
std::vector<ShardedStepCost> priceVirtualStep(mlir::func::FuncOp step,
                                              MeshAttr mesh,
                                              VirtualStep &virtualStep,
                                              const CostQueryOptions &options);

} // namespace trellis::sharding

#endif // TRELLIS_LIB_SHARDING_VIRTUALSTEP_H
