//===- OpShapes.h - Shape rules of plan instructions ------------*- C++ -*-===//
//
// The runtime's copy of each graph op's contract: arity, attributes and the
// output shapes that follow from the input shapes. A plan is untrusted
// input, so these checks run on every instruction before anything executes;
// kernels may then rely on them.
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

/// True for ops that communicate (all_reduce, send, ...).
bool isCollective(const std::string &op);

/// Whether `op` is a send or receive between two ranks (pipeline
/// transfers), which the executor starts at once and waits for later.
bool isPointToPoint(const std::string &op);

/// The pointwise functions of unary ops and `unary_grad`, by name.
bool isUnaryFunction(const std::string &name);

/// NumPy broadcast of two shapes; false if they do not broadcast.
bool broadcastShapes(const std::vector<int64_t> &lhs,
                     const std::vector<int64_t> &rhs,
                     std::vector<int64_t> &result);

/// `[2, 8, 64]`.
std::string formatShape(const std::vector<int64_t> &shape);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_OPSHAPES_H
