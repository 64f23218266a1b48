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

/// True for ops that communicate (all_reduce, send, ...).
bool isCollective(const std::string &op);

/// Whether `op` is a send or receive between two ranks (pipeline
/// transfers), which the executor starts at once and waits for later.
bool isPointToPoint(const std::string &op);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_OPSHAPES_H
