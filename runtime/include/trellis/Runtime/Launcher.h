//===- Launcher.h - One process per rank ------------------------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_LAUNCHER_H
#define TRELLIS_RUNTIME_LAUNCHER_H

#include "trellis/Common/Mesh.h"
#include "trellis/Runtime/Status.h"

namespace trellis::runtime {

struct TrainOptions;

/// Starts this node's ranks of `mesh` (options.nproc processes re-running
/// options.command with --rank and --rendezvous), forwards rank 0's output,
/// and waits. When a rank fails or dies, the others get options.timeout
/// seconds to fail on their own, then are killed. Returns 0 if every rank
/// succeeded, else 1 after naming each rank that failed and how. SIGINT
/// and SIGTERM to the launcher reach every rank; the ranks die with the
/// launcher however it dies (bindRankToLauncher).
int launchRanks(const TrainOptions &options, const Mesh &mesh);

/// In a rank the launcher started: the rank is killed when the launcher
/// exits (a parent-death signal), and fails at once if the launcher is
/// already gone. Elsewhere, nothing.
Status bindRankToLauncher();

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_LAUNCHER_H
