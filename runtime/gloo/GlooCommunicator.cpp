//===- GlooCommunicator.cpp - Collectives over Gloo -----------------------===//
//
// One gloo::rendezvous::Context per group this rank belongs to, created
// through the job's rendezvous store (Rendezvous.h, as a Gloo store) with a
// per-group key prefix. Every Gloo call goes
// through TRELLIS_GLOO_CALL, which turns an exception into a Status carrying
// file, line, the call, and the group.
//
//===----------------------------------------------------------------------===//

#include "Gloo.h"
#include "GlooConnections.h"
#include "GlooStore.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>
#include <cstring>
#include <map>

namespace trellis::runtime {

namespace {

/// Runs a Gloo call; an exception becomes a Status naming the call site.
#define TRELLIS_GLOO_CALL(group, expr)                                         \
  do {                                                                         \
    try {                                                                      \
      expr;                                                                    \
    } catch (const std::exception &error) {                                    \
      return Status::error(std::string("gloo: ") + #expr + " over " +          \
                           (group) + " failed at " + __FILE__ + ":" +          \
                           std::to_string(__LINE__) + ": " + error.what());    \
    }                                                                          \
  } while (false)

/// Gloo's reduce function for 16-bit floats: each pair in fp32, rounded to
/// nearest even.
template <DType Type, ReduceKind Kind>
void reduceNarrowPair(void *out, const void *a, const void *b, size_t count) {
  reduceElements(Type, Kind, out, a, b, count);
}

using ReduceFunction = void (*)(void *, const void *, const void *, size_t);

ReduceFunction narrowReduction(DType dtype, ReduceKind kind) {
  if (dtype == DType::BF16)
    return kind == ReduceKind::Sum
               ? &reduceNarrowPair<DType::BF16, ReduceKind::Sum>
           : kind == ReduceKind::Max
               ? &reduceNarrowPair<DType::BF16, ReduceKind::Max>
               : &reduceNarrowPair<DType::BF16, ReduceKind::Min>;
  return kind == ReduceKind::Sum   ? &reduceNarrowPair<DType::F16, ReduceKind::Sum>
         : kind == ReduceKind::Max ? &reduceNarrowPair<DType::F16, ReduceKind::Max>
                                   : &reduceNarrowPair<DType::F16, ReduceKind::Min>;
}

/// Gloo's own reduce functions for a type it knows.
template <typename T> ReduceFunction nativeReduction(ReduceKind kind) {
  ReduceFunction sum = &gloo::sum<T>, max = &gloo::max<T>, min = &gloo::min<T>;
  return kind == ReduceKind::Sum ? sum : kind == ReduceKind::Max ? max : min;
}

/// A Gloo unbound-buffer send or receive in flight.
class GlooTransfer : public PendingTransfer {
public:
  GlooTransfer(std::unique_ptr<gloo::transport::UnboundBuffer> buffer,
               bool sending, std::chrono::milliseconds timeout,
               std::string description)
      : buffer_(std::move(buffer)), sending_(sending), timeout_(timeout),
        description_(std::move(description)) {}

  Status wait() override {
    try {
      if (sending_)
        buffer_->waitSend(timeout_);
      else
        buffer_->waitRecv(timeout_);
    } catch (const std::exception &error) {
      return Status::error("gloo: " + description_ +
                           " failed: " + error.what());
    }
    return Status::success();
  }

private:
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  bool sending_;
  std::chrono::milliseconds timeout_;
  std::string description_;
};

class GlooCommunicator : public Communicator {
public:
  GlooCommunicator(Mesh mesh, int64_t rank, std::chrono::milliseconds timeout)
      : Communicator(std::move(mesh), rank), timeout_(timeout) {}

  Status connect(const std::vector<AxisList> &groups,
                 const RendezvousOptions &options) {
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options.hostname;
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception &error) {
      return Status::error(std::string("gloo: cannot create a TCP device on ") +
                           options.hostname + ": " + error.what());
    }
    std::unique_ptr<RendezvousStore> rendezvous = openRendezvousStore(options);
    if (!options.agreement.empty())
      TRELLIS_RETURN_IF_ERROR(agreeOnJob(*rendezvous, rank_, mesh_.size(),
                                         options.agreement, timeout_));
    GlooStore store(*rendezvous, timeout_);
    for (const AxisList &axes : groupsToConnect(mesh_, groups)) {
      std::string key = groupName(mesh_, axes);
      // Groups are named by their smallest rank.
      std::vector<int64_t> members = mesh_.group(rank_, axes);
      int64_t first = *std::min_element(members.begin(), members.end());
      std::string name = key + "/" + std::to_string(first);
      gloo::rendezvous::PrefixStore prefixed(name, store);
      GroupAddresses addresses;
      addresses.name = name;
      addresses.group = describe(axes);
      addresses.rank = rank_;
      addresses.position = static_cast<int>(mesh_.groupPosition(rank_, axes));
      addresses.size = static_cast<int>(members.size());
      addresses.listeners.resize(members.size());
      addresses.memberListeners.resize(members.size());
      AddressRecordingStore recording(prefixed, addresses);
      auto context = std::make_shared<gloo::rendezvous::Context>(
          addresses.position, addresses.size);
      context->setTimeout(timeout_);
      try {
        publishPairNonce(prefixed, addresses.position);
        context->connectFullMesh(recording, device_);
      } catch (const std::exception &error) {
        return Status::error("gloo: connecting " + addresses.group +
                             " failed: " + error.what() +
                             explainConnectFailure(addresses, error.what()));
      }
      TRELLIS_RETURN_IF_ERROR(proveGroupMembers(*context, prefixed, addresses,
                                                options.jobToken, timeout_));
      contexts_[key] = std::move(context);
    }
    return Status::success();
  }

  Status allReduce(const AxisList &axes, void *data, int64_t count,
                   DType dtype, ReduceKind kind) override {
    auto context = contextFor(axes);
    if (!context || count == 0)
      return Status::success();
    gloo::AllreduceOptions opts(context);
    opts.setTimeout(timeout_);
    // Gloo reduces f32 and i32 itself; 16-bit floats travel as 16-bit
    // values and each step of the reduction sums a pair in fp32.
    ReduceFunction function = nullptr;
    switch (dtype) {
    case DType::F32:
      opts.setOutput(static_cast<float *>(data), count);
      function = nativeReduction<float>(kind);
      break;
    case DType::I32:
      opts.setOutput(static_cast<int32_t *>(data), count);
      function = nativeReduction<int32_t>(kind);
      break;
    case DType::BF16:
    case DType::F16:
      opts.setOutput(static_cast<uint16_t *>(data), count);
      function = narrowReduction(dtype, kind);
      break;
    }
    opts.setReduceFunction(function);
    TRELLIS_GLOO_CALL(describe(axes), gloo::allreduce(opts));
    return Status::success();
  }

  Status allGather(const AxisList &axes, const void *input, void *output,
                   int64_t count, DType dtype) override {
    size_t bytes = count * dtypeBytes(dtype);
    auto context = contextFor(axes);
    if (!context) {
      std::memcpy(output, input, bytes);
      return Status::success();
    }
    if (count == 0)
      return Status::success();
    gloo::AllgatherOptions opts(context);
    opts.setInput(const_cast<uint8_t *>(static_cast<const uint8_t *>(input)),
                  bytes);
    opts.setOutput(static_cast<uint8_t *>(output), bytes * context->size);
    opts.setTimeout(timeout_);
    TRELLIS_GLOO_CALL(describe(axes), gloo::allgather(opts));
    return Status::success();
  }

  Status allToAll(const AxisList &axes, const void *input, void *output,
                  int64_t chunk, DType dtype) override {
    size_t bytes = chunk * dtypeBytes(dtype);
    auto context = contextFor(axes);
    if (!context) {
      std::memcpy(output, input, bytes);
      return Status::success();
    }
    if (chunk == 0)
      return Status::success();
    gloo::AlltoallOptions opts(context);
    opts.setInput(const_cast<uint8_t *>(static_cast<const uint8_t *>(input)),
                  bytes * context->size);
    opts.setOutput(static_cast<uint8_t *>(output), bytes * context->size);
    opts.setTimeout(timeout_);
    TRELLIS_GLOO_CALL(describe(axes), gloo::alltoall(opts));
    return Status::success();
  }

  Status broadcast(const AxisList &axes, void *data, int64_t count,
                   DType dtype, int64_t root) override {
    auto context = contextFor(axes);
    if (!context || count == 0)
      return Status::success();
    gloo::BroadcastOptions opts(context);
    opts.setOutput(static_cast<uint8_t *>(data), count * dtypeBytes(dtype));
    opts.setRoot(static_cast<int>(root));
    opts.setTimeout(timeout_);
    TRELLIS_GLOO_CALL(describe(axes), gloo::broadcast(opts));
    return Status::success();
  }

  Status send(const AxisList &axes, const void *data, int64_t count,
              DType dtype, int64_t peer, int64_t channel) override {
    auto context = contextFor(axes);
    if (!context)
      return Status::error("send to a group of one rank along " +
                           describe(axes));
    TRELLIS_GLOO_CALL(describe(axes), {
      auto buffer = context->createUnboundBuffer(const_cast<void *>(data),
                                                 count * dtypeBytes(dtype));
      buffer->send(static_cast<int>(peer), static_cast<uint64_t>(channel));
      buffer->waitSend(timeout_);
    });
    return Status::success();
  }

  Status recv(const AxisList &axes, void *data, int64_t count, DType dtype,
              int64_t peer, int64_t channel) override {
    auto context = contextFor(axes);
    if (!context)
      return Status::error("recv from a group of one rank along " +
                           describe(axes));
    TRELLIS_GLOO_CALL(describe(axes), {
      auto buffer =
          context->createUnboundBuffer(data, count * dtypeBytes(dtype));
      buffer->recv(static_cast<int>(peer), static_cast<uint64_t>(channel));
      buffer->waitRecv(timeout_);
    });
    return Status::success();
  }

  StatusOr<std::unique_ptr<PendingTransfer>>
  startSend(const AxisList &axes, const void *data, int64_t count,
            DType dtype, int64_t peer, int64_t channel) override {
    return startTransfer(axes, const_cast<void *>(data),
                         count * dtypeBytes(dtype), peer, channel,
                         /*sending=*/true);
  }

  StatusOr<std::unique_ptr<PendingTransfer>>
  startRecv(const AxisList &axes, void *data, int64_t count, DType dtype,
            int64_t peer, int64_t channel) override {
    return startTransfer(axes, data, count * dtypeBytes(dtype), peer, channel,
                         /*sending=*/false);
  }

  Status permute(const AxisList &axes, const void *input, void *output,
                 int64_t count, DType dtype, int64_t shift) override {
    size_t bytes = count * dtypeBytes(dtype);
    auto context = contextFor(axes);
    int64_t size = mesh_.groupSize(axes);
    int64_t position = mesh_.groupPosition(rank_, axes);
    int64_t to = ((position + shift) % size + size) % size;
    int64_t from = ((position - shift) % size + size) % size;
    if (!context || to == position) {
      std::memcpy(output, input, bytes);
      return Status::success();
    }
    // A reserved slot range keeps permutes apart from user channels.
    constexpr uint64_t kPermuteSlot = uint64_t(1) << 40;
    TRELLIS_GLOO_CALL(describe(axes), {
      auto out =
          context->createUnboundBuffer(const_cast<void *>(input), bytes);
      auto in = context->createUnboundBuffer(output, bytes);
      out->send(static_cast<int>(to), kPermuteSlot);
      in->recv(static_cast<int>(from), kPermuteSlot);
      in->waitRecv(timeout_);
      out->waitSend(timeout_);
    });
    return Status::success();
  }

  Status barrier() override {
    AxisList everything;
    for (size_t axis = 0; axis < mesh_.numAxes(); ++axis)
      everything.push_back(axis);
    auto context = contextFor(everything);
    if (!context)
      return Status::success();
    gloo::BarrierOptions opts(context);
    opts.setTimeout(timeout_);
    TRELLIS_GLOO_CALL("the whole mesh", gloo::barrier(opts));
    return Status::success();
  }

private:
  StatusOr<std::unique_ptr<PendingTransfer>>
  startTransfer(const AxisList &axes, void *data, size_t bytes, int64_t peer,
                int64_t channel, bool sending) {
    auto context = contextFor(axes);
    std::string what = std::string(sending ? "send to" : "recv from") +
                       " member " + std::to_string(peer) + " of " +
                       describe(axes) + " on channel " +
                       std::to_string(channel);
    if (!context)
      return Status::error(what + ": the group has one rank");
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    try {
      buffer = context->createUnboundBuffer(data, bytes);
      if (sending)
        buffer->send(static_cast<int>(peer), static_cast<uint64_t>(channel));
      else
        buffer->recv(static_cast<int>(peer), static_cast<uint64_t>(channel));
    } catch (const std::exception &error) {
      return Status::error("gloo: " + what + " failed: " + error.what());
    }
    return std::unique_ptr<PendingTransfer>(std::make_unique<GlooTransfer>(
        std::move(buffer), sending, timeout_, what));
  }

  std::shared_ptr<gloo::Context> contextFor(const AxisList &axes) const {
    auto it = contexts_.find(groupName(mesh_, axes));
    return it == contexts_.end() ? nullptr : it->second;
  }

  /// `group {0,1,2,3} along "tp" (rank 1 at position 1)`.
  std::string describe(const AxisList &axes) const {
    return "group " + formatRankSet(mesh_.group(rank_, axes)) + " along \"" +
           groupName(mesh_, axes) + "\" (rank " + std::to_string(rank_) + ")";
  }

  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::map<std::string, std::shared_ptr<gloo::Context>> contexts_;
};

} // namespace

StatusOr<std::unique_ptr<Communicator>>
connectGloo(const Mesh &mesh, int64_t rank, const std::vector<AxisList> &groups,
            const RendezvousOptions &options) {
  if (rank < 0 || rank >= mesh.size())
    return Status::error("rank " + std::to_string(rank) +
                         " is outside the mesh of " +
                         std::to_string(mesh.size()) + " ranks");
  // A peer that dies closes its sockets; writing to them must fail with an
  // error we report, not kill this process with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  // Bytes that are not Gloo's on a pair stop Gloo's network thread with an
  // exception; say which listener and peer instead of aborting.
  installGlooTerminateHandler();
  auto communicator =
      std::make_unique<GlooCommunicator>(mesh, rank, options.timeout);
  TRELLIS_RETURN_IF_ERROR(communicator->connect(groups, options));
  return std::unique_ptr<Communicator>(std::move(communicator));
}

} // namespace trellis::runtime
