//===- NcclCommunicator.cpp - Collectives over NCCL -----------------------===//
//
// A stream-ordered Communicator (Communicator.h): every call enqueues on
// the CUDA device's communication stream and returns. The world
// communicator is made from the unique id rank 0 shares through the job's
// rendezvous store (after the job agreement, as Gloo's groups are); each
// group along a list of axes is split from it (ncclCommSplit: color the
// group's smallest rank, key the position in it), so a group's ranks are in
// group order. A reduce_scatter arrives here as the collective lowering's
// all-to-all and ordered sum, as on every backend.
//
// Pipeline transfers: NCCL matches a communicator's sends and receives in
// the order they are issued and runs them in that order, so a send blocked
// on its peer holds back every transfer behind it. Each link of the plan
// (one direction between two ranks, transferLinks) therefore has a
// communicator of its own, split from the world in rounds where each rank
// joins at most one link, and a stream of its own: a transfer waits for
// the compute launched before it (an event), and the compute stream waits
// for it where the program waits (PendingTransfer::wait enqueues that
// wait; the host never blocks). The plan loader has checked that each
// link's receives come in the order of its sends.
//
// The communicators are nonblocking: a call that waits on peers (joining,
// splitting, a link's first connection, an enqueue) returns in progress
// and is polled until it ends, so a peer that never comes fails the rank
// within --timeout instead of blocking it. Each link is connected by one
// value sent when the job starts.
//
// A dead or hung peer: the device's waits poll this communicator's
// watchdog, which reads each communicator's asynchronous error and, past
// --timeout without progress, aborts them all (ncclCommAbort), so the job
// fails with a message instead of hanging.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "Nccl.h"

#include "trellis/Runtime/Communicator.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <thread>

namespace trellis::runtime::cuda {

namespace {

ncclDataType_t ncclType(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I32:
    return ncclInt32;
  default:
    return ncclFloat32;
  }
}

ncclRedOp_t ncclOperation(ReduceKind kind) {
  return kind == ReduceKind::Sum   ? ncclSum
         : kind == ReduceKind::Max ? ncclMax
                                   : ncclMin;
}

class NcclCommunicator : public Communicator {
public:
  NcclCommunicator(Mesh mesh, int64_t rank, CudaStreams &streams,
                   std::shared_ptr<const NcclLibrary> nccl,
                   std::chrono::milliseconds timeout)
      : Communicator(std::move(mesh), rank), streams_(streams),
        nccl_(std::move(nccl)), timeout_(timeout) {}

  ~NcclCommunicator() override {
    streams_.watchCommunication(nullptr);
    for (auto &[name, comm] : groups_)
      release(comm);
    for (auto &[ends, link] : links_) {
      release(link.comm);
      if (link.stream)
        cudaStreamDestroy(link.stream);
    }
    release(world_);
    if (barrierValue_)
      cudaFree(barrierValue_);
  }

  Status connect(const std::vector<AxisList> &groups,
                 const std::vector<TransferLink> &links,
                 const RendezvousOptions &options) {
    std::unique_ptr<RendezvousStore> store = openRendezvousStore(options);
    if (!options.agreement.empty())
      TRELLIS_RETURN_IF_ERROR(
          agreeOnJob(*store, rank_, mesh_.size(), options.agreement, timeout_));
    StatusOr<ncclUniqueId> id =
        shareUniqueId(*nccl_, *store, rank_, "trellis.nccl.world", timeout_);
    if (!id.ok())
      return id.status();
    // Nonblocking: a call that waits on its peers (joining, connecting)
    // returns at once, and settle() polls it within --timeout.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    std::string joining =
        "joining the world of " + std::to_string(mesh_.size()) + " ranks";
    ncclResult_t joined =
        nccl_->commInitRankConfig(&world_, static_cast<int>(mesh_.size()), *id,
                                  static_cast<int>(rank_), &config);
    TRELLIS_RETURN_IF_ERROR(call(joining, joined, world_));
    // Every rank splits the same groups in the same order.
    for (const AxisList &axes : groupsToConnect(mesh_, groups)) {
      std::string name = groupName(mesh_, axes);
      std::vector<int64_t> members = mesh_.group(rank_, axes);
      int color =
          static_cast<int>(*std::min_element(members.begin(), members.end()));
      int key = static_cast<int>(mesh_.groupPosition(rank_, axes));
      ncclComm_t comm = nullptr;
      ncclResult_t split = nccl_->commSplit(world_, color, key, &comm, &config);
      groups_[name] = comm;
      TRELLIS_RETURN_IF_ERROR(settleSplit(
          "splitting the group along \"" + name + "\"", split, comm));
    }
    TRELLIS_RETURN_IF_ERROR(connectLinks(links, config));
    streams_.watchCommunication(
        [this](std::chrono::steady_clock::duration waited) {
          return watch(waited);
        });
    return Status::success();
  }

  Status allReduce(const AxisList &axes, void *data, int64_t count, DType dtype,
                   ReduceKind kind) override {
    ncclComm_t comm = commFor(axes);
    if (!comm || count == 0)
      return Status::success();
    return call("all_reduce over " + groupName(mesh_, axes),
                nccl_->allReduce(data, data, count, ncclType(dtype),
                                 ncclOperation(kind), comm, stream()),
                comm);
  }

  Status allGather(const AxisList &axes, const void *input, void *output,
                   int64_t count, DType dtype) override {
    ncclComm_t comm = commFor(axes);
    if (!comm)
      return copy(output, input, count * dtypeBytes(dtype));
    if (count == 0)
      return Status::success();
    return call(
        "all_gather over " + groupName(mesh_, axes),
        nccl_->allGather(input, output, count, ncclType(dtype), comm, stream()),
        comm);
  }

  Status allToAll(const AxisList &axes, const void *input, void *output,
                  int64_t chunk, DType dtype) override {
    ncclComm_t comm = commFor(axes);
    int64_t bytes = chunk * dtypeBytes(dtype);
    if (!comm)
      return copy(output, input, bytes);
    if (chunk == 0)
      return Status::success();
    std::string what = "all_to_all over " + groupName(mesh_, axes);
    TRELLIS_RETURN_IF_ERROR(call(what, nccl_->groupStart(), nullptr));
    for (int64_t peer = 0; peer < groupSize(axes); ++peer) {
      const char *from = static_cast<const char *>(input) + peer * bytes;
      char *into = static_cast<char *>(output) + peer * bytes;
      ncclResult_t sent = nccl_->send(from, chunk, ncclType(dtype),
                                      static_cast<int>(peer), comm, stream());
      ncclResult_t received = nccl_->recv(
          into, chunk, ncclType(dtype), static_cast<int>(peer), comm, stream());
      if (sent != ncclSuccess || received != ncclSuccess) {
        (void)nccl_->groupEnd();
        return call(what, sent != ncclSuccess ? sent : received, comm);
      }
    }
    return call(what, nccl_->groupEnd(), comm);
  }

  /// Grouped sends and receives of each member's part (this rank's own
  /// included: NCCL pairs a send to self with the receive from self).
  Status allToAllV(const AxisList &axes, const void *input,
                   const std::vector<int64_t> &sendCounts, void *output,
                   const std::vector<int64_t> &recvCounts,
                   DType dtype) override {
    int64_t members = groupSize(axes);
    std::string what =
        "all_to_all of varying parts over " + groupName(mesh_, axes);
    if (static_cast<int64_t>(sendCounts.size()) != members ||
        static_cast<int64_t>(recvCounts.size()) != members)
      return Status::error("nccl: " + what + ": expected a count per member (" +
                           std::to_string(members) + "), found " +
                           std::to_string(sendCounts.size()) + " to send, " +
                           std::to_string(recvCounts.size()) + " to receive");
    ncclComm_t comm = commFor(axes);
    int64_t width = dtypeBytes(dtype);
    if (!comm)
      return copy(output, input, sendCounts[0] * width);
    TRELLIS_RETURN_IF_ERROR(call(what, nccl_->groupStart(), nullptr));
    int64_t sent = 0, received = 0;
    ncclResult_t failed = ncclSuccess;
    for (int64_t member = 0; member < members && failed == ncclSuccess;
         ++member) {
      if (sendCounts[member] > 0)
        failed = nccl_->send(static_cast<const char *>(input) + sent * width,
                             sendCounts[member], ncclType(dtype),
                             static_cast<int>(member), comm, stream());
      if (failed == ncclSuccess && recvCounts[member] > 0)
        failed = nccl_->recv(static_cast<char *>(output) + received * width,
                             recvCounts[member], ncclType(dtype),
                             static_cast<int>(member), comm, stream());
      sent += sendCounts[member];
      received += recvCounts[member];
    }
    ncclResult_t ended = nccl_->groupEnd();
    return call(what, failed != ncclSuccess ? failed : ended, comm);
  }

  Status broadcast(const AxisList &axes, void *data, int64_t count, DType dtype,
                   int64_t root) override {
    ncclComm_t comm = commFor(axes);
    if (!comm || count == 0)
      return Status::success();
    return call("broadcast over " + groupName(mesh_, axes),
                nccl_->broadcast(data, data, count, ncclType(dtype),
                                 static_cast<int>(root), comm, stream()),
                comm);
  }

  Status permute(const AxisList &axes, const void *input, void *output,
                 int64_t count, DType dtype, int64_t shift) override {
    ncclComm_t comm = commFor(axes);
    int64_t bytes = count * dtypeBytes(dtype);
    int64_t size = groupSize(axes), position = groupPosition(axes);
    int64_t to = ((position + shift) % size + size) % size;
    int64_t from = ((position - shift) % size + size) % size;
    if (!comm || to == position)
      return copy(output, input, bytes);
    if (count == 0)
      return Status::success();
    std::string what = "collective_permute over " + groupName(mesh_, axes);
    TRELLIS_RETURN_IF_ERROR(call(what, nccl_->groupStart(), nullptr));
    ncclResult_t sent = nccl_->send(input, count, ncclType(dtype),
                                    static_cast<int>(to), comm, stream());
    ncclResult_t received = nccl_->recv(output, count, ncclType(dtype),
                                        static_cast<int>(from), comm, stream());
    ncclResult_t ended = nccl_->groupEnd();
    return call(what,
                sent != ncclSuccess       ? sent
                : received != ncclSuccess ? received
                                          : ended,
                comm);
  }

  Status send(const AxisList &axes, const void *data, int64_t count,
              DType dtype, int64_t peer, int64_t channel) override {
    StatusOr<std::unique_ptr<PendingTransfer>> started =
        startSend(axes, data, count, dtype, peer, channel);
    return started.ok() ? (*started)->wait() : started.status();
  }
  Status recv(const AxisList &axes, void *data, int64_t count, DType dtype,
              int64_t peer, int64_t channel) override {
    StatusOr<std::unique_ptr<PendingTransfer>> started =
        startRecv(axes, data, count, dtype, peer, channel);
    return started.ok() ? (*started)->wait() : started.status();
  }
  // The channel needs no tag here: a link's transfers pair in order.
  StatusOr<std::unique_ptr<PendingTransfer>>
  startSend(const AxisList &axes, const void *data, int64_t count, DType dtype,
            int64_t peer, int64_t) override {
    return startTransfer(/*sending=*/true, axes, const_cast<void *>(data),
                         count, dtype, peer);
  }
  StatusOr<std::unique_ptr<PendingTransfer>>
  startRecv(const AxisList &axes, void *data, int64_t count, DType dtype,
            int64_t peer, int64_t) override {
    return startTransfer(/*sending=*/false, axes, data, count, dtype, peer);
  }

  Status barrier() override {
    // An all-reduce of nothing would not synchronize: one int32 over the
    // world, waited for.
    ncclComm_t comm = world_;
    TRELLIS_RETURN_IF_ERROR(allocateBarrierValue());
    TRELLIS_RETURN_IF_ERROR(
        call("barrier",
             nccl_->allReduce(barrierValue_, barrierValue_, 1, ncclInt32,
                              ncclSum, comm, stream()),
             comm));
    return streams_.waitForCommunication();
  }

private:
  /// A link's communicator (its sender is rank 0 of it, its receiver rank
  /// 1) and the stream its transfers run on.
  struct Link {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };

  /// A transfer on a link's stream: waiting makes the compute stream wait
  /// for its event.
  class LinkTransfer : public PendingTransfer {
  public:
    LinkTransfer(NcclCommunicator &owner, cudaEvent_t done)
        : owner_(owner), done_(done) {}
    ~LinkTransfer() override {
      if (done_)
        owner_.events_.give(done_);
    }
    Status wait() override {
      if (!done_)
        return Status::success();
      cudaError_t error =
          cudaStreamWaitEvent(owner_.streams_.computeStream(), done_, 0);
      // The wait holds the event's state: it may be recorded again.
      owner_.events_.give(done_);
      done_ = nullptr;
      if (error != cudaSuccess)
        return cudaFailure("ordering compute after a transfer", error);
      return Status::success();
    }

  private:
    NcclCommunicator &owner_;
    cudaEvent_t done_;
  };

  /// Splits a communicator for each of `links` this rank is an end of
  /// (linkRounds: in each round every rank joins one link or none).
  Status connectLinks(const std::vector<TransferLink> &links,
                      ncclConfig_t &config) {
    std::vector<int> rounds = linkRounds(links);
    int roundCount = rounds.empty()
                         ? 0
                         : *std::max_element(rounds.begin(), rounds.end()) + 1;
    for (int round = 0; round < roundCount; ++round) {
      int color = NCCL_SPLIT_NOCOLOR, key = 0;
      const TransferLink *mine = nullptr;
      for (size_t i = 0; i < links.size(); ++i)
        if (rounds[i] == round &&
            (links[i].from == rank_ || links[i].to == rank_)) {
          color = static_cast<int>(i);
          key = links[i].from == rank_ ? 0 : 1;
          mine = &links[i];
        }
      ncclComm_t comm = nullptr;
      ncclResult_t split = nccl_->commSplit(world_, color, key, &comm, &config);
      if (mine)
        links_[*mine].comm = comm;
      TRELLIS_RETURN_IF_ERROR(settleSplit(
          "connecting round " + std::to_string(round) + " of the transfers",
          split, comm));
      if (!mine)
        continue;
      Link &link = links_[*mine];
      std::string what = "connecting the transfers from rank " +
                         std::to_string(mine->from) + " to rank " +
                         std::to_string(mine->to);
      TRELLIS_CUDA_RETURN_IF_ERROR(
          cudaStreamCreateWithFlags(&link.stream, cudaStreamNonBlocking),
          what + ": creating its stream");
      // One value over the link now: its connection is made while every
      // rank connects, not at the step's first transfer (nor while a step
      // is recorded). A rank is an end of one link of a round: the probe's
      // value is the barrier's.
      TRELLIS_RETURN_IF_ERROR(allocateBarrierValue());
      bool sending = mine->from == rank_;
      TRELLIS_RETURN_IF_ERROR(
          call(what,
               sending ? nccl_->send(barrierValue_, 1, ncclInt32, 1, link.comm,
                                     link.stream)
                       : nccl_->recv(barrierValue_, 1, ncclInt32, 0, link.comm,
                                     link.stream),
               link.comm));
      cudaStream_t stream = link.stream;
      TRELLIS_RETURN_IF_ERROR(pollUntil(what, link.comm, [stream] {
        return cudaStreamQuery(stream) != cudaErrorNotReady;
      }));
    }
    return Status::success();
  }

  Status allocateBarrierValue() {
    if (!barrierValue_)
      TRELLIS_CUDA_RETURN_IF_ERROR(
          cudaMalloc(reinterpret_cast<void **>(&barrierValue_),
                     sizeof(int32_t)),
          "allocating the barrier's value");
    return Status::success();
  }

  StatusOr<std::unique_ptr<PendingTransfer>>
  startTransfer(bool sending, const AxisList &axes, void *data, int64_t count,
                DType dtype, int64_t peer) {
    std::vector<int64_t> members = mesh_.group(rank_, axes);
    if (peer < 0 || peer >= static_cast<int64_t>(members.size()))
      return Status::error("nccl: peer " + std::to_string(peer) +
                           " is outside the group along \"" +
                           groupName(mesh_, axes) + "\" of " +
                           std::to_string(members.size()) + " ranks");
    TransferLink ends = sending ? TransferLink{rank_, members[peer]}
                                : TransferLink{members[peer], rank_};
    std::string what = std::string(sending ? "send" : "receive") +
                       " from rank " + std::to_string(ends.from) + " to rank " +
                       std::to_string(ends.to);
    auto found = links_.find(ends);
    if (found == links_.end())
      return Status::error("nccl: " + what +
                           ": no link connects them (the plan's transfer "
                           "links are connected when the job starts)");
    if (count == 0)
      return std::unique_ptr<PendingTransfer>(
          std::make_unique<LinkTransfer>(*this, nullptr));
    const Link &link = found->second;
    // After the compute launched so far (it made the value, or last read
    // the buffer a receive overwrites)...
    cudaEvent_t issued = events_.take();
    cudaError_t error = cudaEventRecord(issued, streams_.computeStream());
    if (error == cudaSuccess)
      error = cudaStreamWaitEvent(link.stream, issued, 0);
    events_.give(issued);
    if (error != cudaSuccess)
      return cudaFailure(what + ": ordering it after compute", error);
    // ...the transfer, on the link's stream.
    TRELLIS_RETURN_IF_ERROR(call(what,
                                 sending
                                     ? nccl_->send(data, count, ncclType(dtype),
                                                   1, link.comm, link.stream)
                                     : nccl_->recv(data, count, ncclType(dtype),
                                                   0, link.comm, link.stream),
                                 link.comm));
    cudaEvent_t done = events_.take();
    if (cudaError_t recorded = cudaEventRecord(done, link.stream);
        recorded != cudaSuccess) {
      events_.give(done);
      return cudaFailure(what + ": recording its event", recorded);
    }
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<LinkTransfer>(*this, done));
  }

  cudaStream_t stream() const { return streams_.communicationStream(); }

  ncclComm_t commFor(const AxisList &axes) const {
    auto it = groups_.find(groupName(mesh_, axes));
    return it == groups_.end() ? nullptr : it->second;
  }

  Status copy(void *output, const void *input, int64_t bytes) {
    if (bytes == 0 || output == input)
      return Status::success();
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(output, input, bytes,
                                                 cudaMemcpyDeviceToDevice,
                                                 stream()),
                                 "copying within a group of one rank");
    return Status::success();
  }

  /// `result` of the call `what` on `comm`: a failure, or, when the call
  /// is still in progress (a nonblocking communicator), its end (settle).
  Status call(const std::string &what, ncclResult_t result, ncclComm_t comm) {
    if (result == ncclInProgress && comm)
      return settle(what, comm);
    if (result == ncclSuccess || result == ncclInProgress)
      return Status::success();
    return nccl_->failure(what + " (rank " + std::to_string(rank_) + ")",
                          result);
  }

  /// A split of the world into `comm` (null: this rank joined none) ended:
  /// the new communicator and the world alike, which a nonblocking split
  /// leaves busy until it ends.
  Status settleSplit(const std::string &what, ncclResult_t split,
                     ncclComm_t comm) {
    TRELLIS_RETURN_IF_ERROR(call(what, split, comm ? comm : world_));
    return settle(what, world_);
  }

  /// Polls `comm` until the call `what` left in progress ends.
  Status settle(const std::string &what, ncclComm_t comm) {
    return pollUntil(what, comm, [] { return true; });
  }

  /// Polls until `comm` has no call in progress and `done()` holds: an
  /// error of `comm`, or no end within --timeout (a peer that died or never
  /// joined), aborts every communicator of the rank and fails.
  Status pollUntil(const std::string &what, ncclComm_t comm,
                   const std::function<bool()> &done) {
    auto start = std::chrono::steady_clock::now();
    while (true) {
      ncclResult_t state = ncclSuccess;
      nccl_->commGetAsyncError(comm, &state);
      if (state == ncclSuccess && done())
        return Status::success();
      if (state != ncclSuccess && state != ncclInProgress) {
        abortAll();
        return nccl_->failure(what + " (rank " + std::to_string(rank_) + ")",
                              state);
      }
      if (std::chrono::steady_clock::now() - start > timeout_) {
        abortAll();
        return Status::error(
            "nccl: rank " + std::to_string(rank_) + ": " + what +
            " did not finish within " +
            std::to_string(timeout_.count() / 1000) +
            " s (--timeout): a peer died or stopped answering; every NCCL "
            "communicator of this rank was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  /// The device's waits call this while the communication stream runs: an
  /// asynchronous NCCL error, or no progress within --timeout, aborts every
  /// communicator and fails the wait.
  Status watch(std::chrono::steady_clock::duration waited) {
    // Each communicator, as a message names it.
    std::vector<std::pair<std::string, ncclComm_t>> all;
    for (const auto &[name, comm] : groups_)
      all.emplace_back("the group along \"" + name + "\"", comm);
    all.emplace_back("the world", world_);
    for (const auto &[ends, link] : links_)
      all.emplace_back("the transfers from rank " + std::to_string(ends.from) +
                           " to rank " + std::to_string(ends.to),
                       link.comm);
    for (const auto &[name, comm] : all) {
      if (!comm)
        continue;
      ncclResult_t state = ncclSuccess;
      nccl_->commGetAsyncError(comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        abortAll();
        return nccl_->failure(name + " (rank " + std::to_string(rank_) + ")",
                              state);
      }
    }
    if (waited < timeout_)
      return Status::success();
    abortAll();
    return Status::error(
        "nccl: rank " + std::to_string(rank_) + " waited " +
        std::to_string(timeout_.count() / 1000) +
        " s (--timeout) for its collectives: a peer died or stopped "
        "answering; every NCCL communicator of this rank was aborted");
  }

  /// Ends `comm` (null: nothing): its outstanding work finished
  /// (ncclCommFinalize, which a nonblocking communicator does in the
  /// background, polled) within --timeout, then its resources freed; a
  /// communicator that cannot finish (a peer died) or was aborted is
  /// aborted.
  void release(ncclComm_t comm) {
    if (!comm)
      return;
    ncclResult_t state =
        aborted_ ? ncclInternalError : nccl_->commFinalize(comm);
    auto start = std::chrono::steady_clock::now();
    while (state == ncclInProgress &&
           std::chrono::steady_clock::now() - start < timeout_) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      nccl_->commGetAsyncError(comm, &state);
    }
    if (state == ncclSuccess)
      nccl_->commDestroy(comm);
    else
      nccl_->commAbort(comm);
  }

  void abortAll() {
    if (aborted_)
      return;
    aborted_ = true;
    for (auto &[name, comm] : groups_)
      if (comm)
        nccl_->commAbort(comm);
    for (auto &[ends, link] : links_) {
      if (link.comm)
        nccl_->commAbort(link.comm);
      link.comm = nullptr;
    }
    if (world_)
      nccl_->commAbort(world_);
    groups_.clear();
    world_ = nullptr;
  }

  CudaStreams &streams_;
  std::shared_ptr<const NcclLibrary> nccl_;
  std::chrono::milliseconds timeout_;
  ncclComm_t world_ = nullptr;
  std::map<std::string, ncclComm_t> groups_;
  /// This rank's links; their transfers' events, free for reuse.
  std::map<TransferLink, Link> links_;
  EventPool events_;
  int32_t *barrierValue_ = nullptr;
  bool aborted_ = false;
};

} // namespace

StatusOr<std::unique_ptr<Communicator>>
connectNccl(Device &device, const Mesh &mesh, int64_t rank,
            const std::vector<AxisList> &groups,
            const std::vector<TransferLink> &links,
            const RendezvousOptions &options) {
  auto *streams = dynamic_cast<CudaStreams *>(&device);
  if (!streams)
    return Status::error("cuda: NCCL needs a cuda device, found '" +
                         device.name() + "'");
  if (rank < 0 || rank >= mesh.size())
    return Status::error("rank " + std::to_string(rank) +
                         " is outside the mesh of " +
                         std::to_string(mesh.size()) + " ranks");
  StatusOr<std::shared_ptr<const NcclLibrary>> nccl = NcclLibrary::load();
  if (!nccl.ok())
    return nccl.status();
  auto communicator = std::make_unique<NcclCommunicator>(
      mesh, rank, *streams, std::move(*nccl), options.timeout);
  TRELLIS_RETURN_IF_ERROR(communicator->connect(groups, links, options));
  return std::unique_ptr<Communicator>(std::move(communicator));
}

} // namespace trellis::runtime::cuda
