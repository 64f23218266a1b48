//===- Launcher.h - One process per rank ------------------------*- C++ -*-===//

#ifndef TRELLIS_RUNTIME_LAUNCHER_H
#define TRELLIS_RUNTIME_LAUNCHER_H

#include "trellis/Common/Mesh.h"
#include "trellis/Runtime/Status.h"

namespace trellis::runtime {

struct TrainOptions;

/// Starts this node's ranks of `mesh` (options.nproc processes re-running
/// options.command with --rank and --rendezvous), forwards rank 0's output,
/// and waits. When a rank fails or dies, the others get a second to fail on
/// their own (a failed rank's peers see its sockets close at once); those
/// still running are named as hung, first, and killed. Returns 0 if every rank
/// succeeded, else 1 after naming each rank that failed and how. SIGINT
/// and SIGTERM to the launcher reach every rank; the ranks die with the
/// launcher however it dies (bindRankToLauncher).
int launchRanks(const TrainOptions &options, const Mesh &mesh);

/// The environment variable holding the job's secret, which every request
/// to the TCP rendezvous store presents: node 0's launcher makes one when
/// neither it nor --job-token-file gives one, and hands it to its ranks;
/// other nodes must be given the same (docs/guide/Launching.md).
constexpr const char *kJobTokenVariable = "TRELLIS_JOB_TOKEN";

/// The job's secret: TRELLIS_JOB_TOKEN, else the first line of
/// options.jobTokenFile, else (a single node) a fresh random one; an error
/// for a TCP store over several nodes without one, or a token file that
/// is empty or holds fewer than 16 characters.
StatusOr<std::string> resolveJobToken(const TrainOptions &options);

/// In a rank the launcher started: the rank is killed when the launcher
/// exits (a parent-death signal), and fails at once if the launcher is
/// already gone. Elsewhere, nothing.
Status bindRankToLauncher();

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_LAUNCHER_H
