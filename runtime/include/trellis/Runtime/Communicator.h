//===- Communicator.h - Collectives over groups of a device mesh -*- C++
//-*-===//
//
// A rank's view of the other ranks: collectives and point-to-point over
// groups named by mesh axes (the ranks that differ only along those axes,
// ordered by position, the first axis most significant). Backends (Gloo on
// CPU; NCCL on GPUs) implement it; every failure, including a peer that died
// or stopped answering within the timeout, is a Status naming the
// operation, the group and the ranks involved.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_COMMUNICATOR_H
#define TRELLIS_RUNTIME_COMMUNICATOR_H

#include "trellis/Common/Mesh.h"
#include "trellis/Runtime/HostReduction.h"
#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Status.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trellis::runtime {

/// A send or receive in flight; its buffer must stay alive until wait()
/// returns.
class PendingTransfer {
public:
  virtual ~PendingTransfer() = default;
  /// Blocks until the transfer completed (or failed, or timed out).
  virtual Status wait() = 0;
};

/// Every axis of `mesh`: the group of all ranks.
AxisList everyAxis(const Mesh &mesh);

/// A group's name for keys and messages: its axes' names ("dp,tp"), or
/// "world" for none.
std::string groupName(const Mesh &mesh, const AxisList &axes);

/// The groups a communicator of `mesh` connects for the plan's `groups`:
/// each distinct axis list whose groups have more than one rank, then the
/// whole mesh's (every rank lists the same, in the same order).
std::vector<AxisList> groupsToConnect(const Mesh &mesh,
                                      const std::vector<AxisList> &groups);

class Communicator {
public:
  virtual ~Communicator() = default;

  const Mesh &mesh() const { return mesh_; }
  int64_t rank() const { return rank_; }

  /// Ranks and this rank's position in its group along `axes`.
  int64_t groupSize(const AxisList &axes) const {
    return mesh_.groupSize(axes);
  }
  int64_t groupPosition(const AxisList &axes) const {
    return mesh_.groupPosition(rank_, axes);
  }

  // Buffers are `count` elements of `dtype` in the memory of the device it
  // was connected for (Backend::connect). Sums of 16-bit floats are taken
  // in fp32 and rounded to nearest even after each step of the reduction
  // (the wire carries the 16-bit values).
  //
  // A communicator either completes each call before returning (Gloo) or
  // is stream-ordered (NCCL): a call then returns once the exchange is
  // enqueued on the device's communication stream, its results may be read
  // only after Device::waitCommunication or synchronize, and its failure
  // may be reported there instead. Callers therefore run collectives
  // through Device::enqueueCommunication, and exchange host values through
  // HostCollectives.h.

  /// In place: every member ends with the reduction of all members' data.
  virtual Status allReduce(const AxisList &axes, void *data, int64_t count,
                           DType dtype, ReduceKind kind) = 0;
  /// `output` (count * group size) receives every member's `input` (count),
  /// in group order.
  virtual Status allGather(const AxisList &axes, const void *input,
                           void *output, int64_t count, DType dtype) = 0;
  /// `input` holds group-size chunks of `chunk` elements; chunk j goes to
  /// member j; `output` receives member i's chunk for us at position i.
  virtual Status allToAll(const AxisList &axes, const void *input,
                          void *output, int64_t chunk, DType dtype) = 0;
  /// In place: every member ends with the data of member `root`.
  virtual Status broadcast(const AxisList &axes, void *data, int64_t count,
                           DType dtype, int64_t root) = 0;
  /// Sends `data` to member `peer` on `channel`.
  virtual Status send(const AxisList &axes, const void *data, int64_t count,
                      DType dtype, int64_t peer, int64_t channel) = 0;
  /// Receives into `data` from member `peer` on `channel`.
  virtual Status recv(const AxisList &axes, void *data, int64_t count,
                      DType dtype, int64_t peer, int64_t channel) = 0;
  /// Starts sending `data` to member `peer` on `channel` and returns at
  /// once: the transfer completes when the peer receives it.
  virtual StatusOr<std::unique_ptr<PendingTransfer>>
  startSend(const AxisList &axes, const void *data, int64_t count,
            DType dtype, int64_t peer, int64_t channel) = 0;
  /// Starts receiving into `data` from member `peer` on `channel`.
  virtual StatusOr<std::unique_ptr<PendingTransfer>>
  startRecv(const AxisList &axes, void *data, int64_t count, DType dtype,
            int64_t peer, int64_t channel) = 0;
  /// `output` receives the data of member (position - shift) mod size.
  virtual Status permute(const AxisList &axes, const void *input,
                         void *output, int64_t count, DType dtype,
                         int64_t shift) = 0;
  /// Returns once every rank of the mesh has called it.
  virtual Status barrier() = 0;
  /// A variable all-to-all: `input` holds, member after member in group
  /// order, sendCounts[j] elements for member j; `output` receives, member
  /// after member, recvCounts[i] elements from member i. Every rank's
  /// recvCounts[i] must be member i's sendCounts for it (an exchange of
  /// the counts first gives them). The default moves the other members'
  /// parts through startSend / startRecv on a channel of its own and
  /// copies this rank's own part with memcpy: host-addressable buffers.
  virtual Status allToAllV(const AxisList &axes, const void *input,
                           const std::vector<int64_t> &sendCounts, void *output,
                           const std::vector<int64_t> &recvCounts, DType dtype);

protected:
  Communicator(Mesh mesh, int64_t rank) : mesh_(std::move(mesh)), rank_(rank) {}

  Mesh mesh_;
  int64_t rank_;
};

/// What every rank of a job must agree on, as (name, value) pairs in a
/// fixed order: e.g. ("plan", "crc32 1a2b3c4d"), ("seed", "0").
using JobFields = std::vector<std::pair<std::string, std::string>>;

/// How the ranks of one job find each other.
struct RendezvousOptions {
  /// A directory all ranks can write (a fresh one per job); used when
  /// storePort is 0.
  std::string storeDir;
  /// The TCP store served by the launcher of node 0 (--master-addr,
  /// --master-port), when storePort > 0.
  std::string storeHost;
  int storePort = 0;
  /// The address this rank listens on.
  std::string hostname = "127.0.0.1";
  /// Bound on connecting and on every collective.
  std::chrono::milliseconds timeout{60000};
  /// The job's secret, presented to the TCP store (TRELLIS_JOB_TOKEN).
  std::string jobToken;
  /// Compared across ranks before any group connects (empty: nothing).
  JobFields agreement;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_COMMUNICATOR_H
