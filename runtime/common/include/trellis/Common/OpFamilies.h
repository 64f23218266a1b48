//===- OpFamilies.h - The families of plan ops and their members -*- C++ -*-===//
//
// Every row of the op table belongs to one family; a family whose rows
// compute different things (unary, binary, layout, reduction, norm,
// position, attention, expert, optimizer, collective, point-to-point) names
// each row's member by its own enum, so passes and kernels switch on typed
// data instead of op names. The planner's time model prices rows by their compute class.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_OPFAMILIES_H
#define TRELLIS_COMMON_OPFAMILIES_H

#include "trellis/Common/BinaryFunctions.h"
#include "trellis/Common/UnaryFunctions.h"

#include <string>

namespace trellis {

/// The families, one per kind of computation. Rows of one family share
/// their kernel's shape on every backend.
#define TRELLIS_OP_FAMILIES(X)                                                 \
  X(Fill, "fill")                                                              \
  X(Binary, "binary")                                                          \
  X(Unary, "unary")                                                            \
  X(UnaryGrad, "unary gradient")                                               \
  X(Scale, "scale")                                                            \
  X(Cast, "cast")                                                              \
  X(Accumulate, "accumulate")                                                  \
  X(FusedElementwise, "fused elementwise")                                     \
  X(Reduction, "reduction")                                                    \
  X(Layout, "layout")                                                          \
  X(Matmul, "matmul")                                                          \
  X(Rowwise, "row-wise")                                                       \
  X(Norm, "norm")                                                              \
  X(Embedding, "embedding")                                                    \
  X(Position, "position")                                                      \
  X(Loss, "loss")                                                              \
  X(Attention, "attention")                                                    \
  X(Expert, "expert")                                                          \
  X(Optimizer, "optimizer")                                                    \
  X(Collective, "collective")                                                  \
  X(PointToPoint, "point-to-point")

enum class OpFamily {
#define TRELLIS_OP_FAMILY_ENUMERATOR(NAME, TEXT) NAME,
  TRELLIS_OP_FAMILIES(TRELLIS_OP_FAMILY_ENUMERATOR)
#undef TRELLIS_OP_FAMILY_ENUMERATOR
};

/// "unary", "point-to-point", ... (docs, `trellis ops`).
const char *opFamilyName(OpFamily family);

/// How an op's time is modelled: a GEMM's by its compute rate and shape,
/// attention's by its own efficiency, memory-bound ops' by the bytes they
/// move, communication by the interconnect.
enum class ComputeClass { Gemm, Attention, MemoryBound, Communication };

/// "gemm", "attention", "memory-bound", "communication".
const char *computeClassName(ComputeClass computeClass);

// The members of the families whose rows differ in what they compute (a
// family's forward and gradient rows share a member: OpContract::gradient
// tells them apart).

/// The layout family: moves of elements without arithmetic.
enum class LayoutKind { BroadcastTo, Reshape, Transpose, Slice, Pad, Concat };

/// The reduction family: what the reduced elements become.
enum class ReductionFunction { Sum, Mean, Max };

// The row-wise family (softmax and its gradient) has one member.

/// The norm family: layer norm (weight and bias) or RMS norm (weight).
enum class NormKind { Layer, Rms };

/// The position family: rotary embeddings, and the position ids.
enum class PositionKind { Rope, Positions };

/// The attention family: whole attention, or ring attention's pieces (one
/// key block's partial result, and the merge of two).
enum class AttentionPiece { Whole, Block, Merge };

/// The expert family: the router, the experts' grouped products, the
/// tokens per expert, and the router's load-balancing bias update.
enum class ExpertKind { Route, Matmul, Counts, BiasUpdate };

/// The optimizer family's updates (also the rule trellis-insert-optimizer
/// adds).
enum class OptimizerKind { AdamW, Sgd };

/// The members of the collective and point-to-point families.
#define TRELLIS_COLLECTIVE_KINDS(X)                                            \
  X(AllReduce, "all_reduce")                                                   \
  X(AllGather, "all_gather")                                                   \
  X(ReduceScatter, "reduce_scatter")                                           \
  X(AllToAll, "all_to_all")                                                    \
  X(Broadcast, "broadcast")                                                    \
  X(SliceShard, "slice_shard")                                                 \
  X(CollectivePermute, "collective_permute")                                   \
  X(Send, "send")                                                              \
  X(Recv, "recv")

enum class CollectiveKind {
#define TRELLIS_COLLECTIVE_ENUMERATOR(NAME, TEXT) NAME,
  TRELLIS_COLLECTIVE_KINDS(TRELLIS_COLLECTIVE_ENUMERATOR)
#undef TRELLIS_COLLECTIVE_ENUMERATOR
};

/// The family whose rows name their member by `Member`: memberAs<Member>()
/// reads it (OpContract.h).
template <typename Member> struct FamilyOfMember;
#define TRELLIS_FAMILY_OF_MEMBER(MEMBER, FAMILY)                               \
  template <> struct FamilyOfMember<MEMBER> {                                  \
    static constexpr OpFamily value = OpFamily::FAMILY;                        \
  };
TRELLIS_FAMILY_OF_MEMBER(UnaryFunction, Unary)
TRELLIS_FAMILY_OF_MEMBER(BinaryFunction, Binary)
TRELLIS_FAMILY_OF_MEMBER(LayoutKind, Layout)
TRELLIS_FAMILY_OF_MEMBER(ReductionFunction, Reduction)
TRELLIS_FAMILY_OF_MEMBER(NormKind, Norm)
TRELLIS_FAMILY_OF_MEMBER(PositionKind, Position)
TRELLIS_FAMILY_OF_MEMBER(AttentionPiece, Attention)
TRELLIS_FAMILY_OF_MEMBER(ExpertKind, Expert)
TRELLIS_FAMILY_OF_MEMBER(OptimizerKind, Optimizer)
#undef TRELLIS_FAMILY_OF_MEMBER

/// The op name of a collective kind ("all_reduce").
const char *collectiveKindName(CollectiveKind kind);

/// The kind an op name or a time model's key names ("all_reduce"); false
/// for any other text.
bool findCollectiveKind(const std::string &name, CollectiveKind &kind);

/// Whether a collective of `kind` moves data between two ranks only
/// (send, recv) rather than among a group.
inline bool isPointToPoint(CollectiveKind kind) {
  return kind == CollectiveKind::Send || kind == CollectiveKind::Recv;
}

} // namespace trellis

#endif // TRELLIS_COMMON_OPFAMILIES_H
