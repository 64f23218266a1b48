//===- Gloo.h - Communicators over Gloo -------------------------*- C++ -*-===//
//
// The CPU backend's communicator: Gloo over TCP, one context per group.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_GLOO_GLOO_H
#define TRELLIS_RUNTIME_GLOO_GLOO_H

#include "trellis/Runtime/Communicator.h"

namespace trellis::runtime {

/// Connects `rank` of `mesh` through Gloo over TCP, building communicators
/// for the groups along every axis list in `groups` (and the whole mesh).
/// Ignores SIGPIPE process-wide, so that a dead peer is an error, not a
/// signal.
StatusOr<std::unique_ptr<Communicator>>
connectGloo(const Mesh &mesh, int64_t rank, const std::vector<AxisList> &groups,
            const RendezvousOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_GLOO_GLOO_H
