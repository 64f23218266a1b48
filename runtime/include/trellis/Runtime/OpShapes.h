//===- OpShapes.h - Plan instructions against the op contract ---*- C++ -*-===//
//
// A plan is untrusted input: every instruction is checked against its op's
// contract (trellis/Common/OpContract.h: operand count and types,
// attributes, the shape rule) before anything executes; kernels may then
// rely on it.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_OPSHAPES_H
#define TRELLIS_RUNTIME_OPSHAPES_H

#include "trellis/Runtime/Plan.h"

namespace trellis::runtime {

/// Checks `instruction` against the buffers it names. `axes` are its
/// resolved mesh axes (collectives), `mesh` the plan's mesh.
Status validateInstruction(const Instruction &instruction,
                           const std::vector<BufferDesc> &buffers,
                           const std::vector<size_t> &axes, const Mesh &mesh);

/// The row-major strides of `shape`, in elements.
std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape);

/// The strides of `shape` seen from a NumPy broadcast result of rank `rank`
/// (right-aligned): zero along stretched and missing dimensions.
std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &shape,
                                      size_t rank);

/// A matmul's sizes: result[batch..., m, n] = op(lhs)[m, k] · op(rhs)[k, n]
/// (the transposes the instruction names), `batch` the product of lhs's
/// leading dimensions; a rank-2 rhs is shared by every batch.
struct MatmulSizes {
  int64_t m = 0, k = 0, n = 0, batch = 1;
  bool sharedRhs = false;
};

/// The sizes of a validated matmul with operands of shapes `lhs`, `rhs`.
MatmulSizes matmulSizes(const std::vector<int64_t> &lhs,
                        const std::vector<int64_t> &rhs, bool transposeLhs,
                        bool transposeRhs);

/// True for ops that communicate (all_reduce, send, ...).
bool isCollective(const std::string &op);

/// Whether `op` is a send or receive between two ranks (pipeline
/// transfers), which the executor starts at once and waits for later.
bool isPointToPoint(const Instruction &instruction);

/// Whether a point-to-point instruction sends (else it receives).
bool isSend(const Instruction &instruction);

/// Whether an instruction computes the loss (the loss family's forward op,
/// whose logits' last dimension is the vocabulary).
bool isLoss(const Instruction &instruction);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_OPSHAPES_H
