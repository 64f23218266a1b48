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
// A dead or hung peer: the device's waits poll this communicator's
// watchdog, which reads each communicator's asynchronous error and, past
// --timeout without progress, aborts them all (ncclCommAbort), so the job
// fails with a message instead of hanging.
//
//===----------------------------------------------------------------------===//

#include "CudaSupport.h"
#include "Nccl.h"

#include "trellis/Runtime/Communicator.h"

#include <chrono>
#include <map>

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
      aborted_ ? nccl_->commAbort(comm) : nccl_->commDestroy(comm);
    if (!aborted_ && world_)
      nccl_->commDestroy(world_);
    if (barrierValue_)
      cudaFree(barrierValue_);
  }

  Status connect(const std::vector<AxisList> &groups,
                 const RendezvousOptions &options) {
    std::unique_ptr<RendezvousStore> store = openRendezvousStore(options);
    if (!options.agreement.empty())
      TRELLIS_RETURN_IF_ERROR(
          agreeOnJob(*store, rank_, mesh_.size(), options.agreement, timeout_));
    StatusOr<ncclUniqueId> id =
        shareUniqueId(*nccl_, *store, rank_, "trellis.nccl.world", timeout_);
    if (!id.ok())
      return id.status();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    TRELLIS_RETURN_IF_ERROR(
        call("joining the world of " + std::to_string(mesh_.size()) + " ranks",
             nccl_->commInitRankConfig(&world_, static_cast<int>(mesh_.size()),
                                       *id, static_cast<int>(rank_), &config)));
    // Every rank splits the same groups in the same order.
    for (const AxisList &axes : groupsToConnect(mesh_, groups)) {
      std::string name = groupName(mesh_, axes);
      std::vector<int64_t> members = mesh_.group(rank_, axes);
      int color =
          static_cast<int>(*std::min_element(members.begin(), members.end()));
      int key = static_cast<int>(mesh_.groupPosition(rank_, axes));
      ncclComm_t comm = nullptr;
      TRELLIS_RETURN_IF_ERROR(
          call("splitting the group along \"" + name + "\"",
               nccl_->commSplit(world_, color, key, &comm, &config)));
      groups_[name] = comm;
    }
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
                                 ncclOperation(kind), comm, stream()));
  }

  Status allGather(const AxisList &axes, const void *input, void *output,
                   int64_t count, DType dtype) override {
    ncclComm_t comm = commFor(axes);
    if (!comm)
      return copy(output, input, count * dtypeBytes(dtype));
    if (count == 0)
      return Status::success();
    return call("all_gather over " + groupName(mesh_, axes),
                nccl_->allGather(input, output, count, ncclType(dtype), comm,
                                 stream()));
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
    TRELLIS_RETURN_IF_ERROR(call(what, nccl_->groupStart()));
    for (int64_t peer = 0; peer < groupSize(axes); ++peer) {
      const char *from = static_cast<const char *>(input) + peer * bytes;
      char *into = static_cast<char *>(output) + peer * bytes;
      ncclResult_t sent = nccl_->send(from, chunk, ncclType(dtype),
                                      static_cast<int>(peer), comm, stream());
      ncclResult_t received = nccl_->recv(
          into, chunk, ncclType(dtype), static_cast<int>(peer), comm, stream());
      if (sent != ncclSuccess || received != ncclSuccess) {
        (void)nccl_->groupEnd();
        return call(what, sent != ncclSuccess ? sent : received);
      }
    }
    return call(what, nccl_->groupEnd());
  }

  Status broadcast(const AxisList &axes, void *data, int64_t count, DType dtype,
                   int64_t root) override {
    ncclComm_t comm = commFor(axes);
    if (!comm || count == 0)
      return Status::success();
    return call("broadcast over " + groupName(mesh_, axes),
                nccl_->broadcast(data, data, count, ncclType(dtype),
                                 static_cast<int>(root), comm, stream()));
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
    TRELLIS_RETURN_IF_ERROR(call(what, nccl_->groupStart()));
    ncclResult_t sent = nccl_->send(input, count, ncclType(dtype),
                                    static_cast<int>(to), comm, stream());
    ncclResult_t received = nccl_->recv(output, count, ncclType(dtype),
                                        static_cast<int>(from), comm, stream());
    ncclResult_t ended = nccl_->groupEnd();
    return call(what, sent != ncclSuccess       ? sent
                      : received != ncclSuccess ? received
                                                : ended);
  }

  // Pipeline transfers: NCCL orders point-to-point calls on a stream, so a
  // send blocked on its peer would hold back the receives behind it (a
  // 1F1B schedule deadlocks). They need streams (or communicators) per
  // direction, ordered against compute by events; not built yet.
  Status send(const AxisList &, const void *, int64_t, DType, int64_t,
              int64_t) override {
    return transfersNotBuilt();
  }
  Status recv(const AxisList &, void *, int64_t, DType, int64_t,
              int64_t) override {
    return transfersNotBuilt();
  }
  StatusOr<std::unique_ptr<PendingTransfer>> startSend(const AxisList &,
                                                       const void *, int64_t,
                                                       DType, int64_t,
                                                       int64_t) override {
    return transfersNotBuilt();
  }
  StatusOr<std::unique_ptr<PendingTransfer>> startRecv(const AxisList &, void *,
                                                       int64_t, DType, int64_t,
                                                       int64_t) override {
    return transfersNotBuilt();
  }

  Status barrier() override {
    // An all-reduce of nothing would not synchronize: one int32 over the
    // world, waited for.
    ncclComm_t comm = world_;
    if (!barrierValue_) {
      TRELLIS_CUDA_RETURN_IF_ERROR(
          cudaMalloc(reinterpret_cast<void **>(&barrierValue_),
                     sizeof(int32_t)),
          "allocating the barrier's value");
    }
    TRELLIS_RETURN_IF_ERROR(
        call("barrier", nccl_->allReduce(barrierValue_, barrierValue_, 1,
                                         ncclInt32, ncclSum, comm, stream())));
    return streams_.waitForCommunication();
  }

private:
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

  Status call(const std::string &what, ncclResult_t result) const {
    if (result == ncclSuccess || result == ncclInProgress)
      return Status::success();
    return nccl_->failure(what + " (rank " + std::to_string(rank_) + ")",
                          result);
  }

  static Status transfersNotBuilt() {
    return Status::error("--device cuda: pipeline transfers over NCCL are not "
                         "built yet; run pipelines with --device cpu");
  }

  /// The device's waits call this while the communication stream runs: an
  /// asynchronous NCCL error, or no progress within --timeout, aborts every
  /// communicator and fails the wait.
  Status watch(std::chrono::steady_clock::duration waited) {
    std::vector<std::pair<std::string, ncclComm_t>> all(groups_.begin(),
                                                        groups_.end());
    all.emplace_back("world", world_);
    for (const auto &[name, comm] : all) {
      ncclResult_t state = ncclSuccess;
      nccl_->commGetAsyncError(comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        abortAll();
        return nccl_->failure("the group along \"" + name + "\" (rank " +
                                  std::to_string(rank_) + ")",
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

  void abortAll() {
    if (aborted_)
      return;
    aborted_ = true;
    for (auto &[name, comm] : groups_)
      nccl_->commAbort(comm);
    nccl_->commAbort(world_);
    groups_.clear();
    world_ = nullptr;
  }

  CudaStreams &streams_;
  std::shared_ptr<const NcclLibrary> nccl_;
  std::chrono::milliseconds timeout_;
  ncclComm_t world_ = nullptr;
  std::map<std::string, ncclComm_t> groups_;
  int32_t *barrierValue_ = nullptr;
  bool aborted_ = false;
};

} // namespace

StatusOr<std::unique_ptr<Communicator>>
connectNccl(Device &device, const Mesh &mesh, int64_t rank,
            const std::vector<AxisList> &groups,
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
  TRELLIS_RETURN_IF_ERROR(communicator->connect(groups, options));
  return std::unique_ptr<Communicator>(std::move(communicator));
}

} // namespace trellis::runtime::cuda
