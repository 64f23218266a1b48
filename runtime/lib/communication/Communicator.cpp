//===- Communicator.cpp - The groups a communicator connects --------------===//

#include "trellis/Runtime/Communicator.h"

#include <algorithm>
#include <cstring>

namespace trellis::runtime {

AxisList everyAxis(const Mesh &mesh) {
  AxisList axes;
  for (size_t axis = 0; axis < mesh.numAxes(); ++axis)
    axes.push_back(axis);
  return axes;
}

std::string groupName(const Mesh &mesh, const AxisList &axes) {
  std::string name;
  for (size_t axis : axes)
    name += (name.empty() ? "" : ",") + mesh.axes()[axis].name;
  return name.empty() ? "world" : name;
}

std::vector<AxisList> groupsToConnect(const Mesh &mesh,
                                      const std::vector<AxisList> &groups) {
  std::vector<AxisList> all = groups;
  all.push_back(everyAxis(mesh));
  std::vector<AxisList> connected;
  std::vector<std::string> names;
  for (const AxisList &axes : all) {
    std::string name = groupName(mesh, axes);
    if (mesh.groupSize(axes) == 1 ||
        std::find(names.begin(), names.end(), name) != names.end())
      continue;
    names.push_back(name);
    connected.push_back(axes);
  }
  return connected;
}

Status Communicator::allToAllV(const AxisList &axes, const void *input,
                               const std::vector<int64_t> &sendCounts,
                               void *output,
                               const std::vector<int64_t> &recvCounts,
                               DType dtype) {
  int64_t size = groupSize(axes), self = groupPosition(axes);
  if (static_cast<int64_t>(sendCounts.size()) != size ||
      static_cast<int64_t>(recvCounts.size()) != size)
    return Status::error("all_to_all_v over a group of " +
                         std::to_string(size) + " ranks got " +
                         std::to_string(sendCounts.size()) + " send and " +
                         std::to_string(recvCounts.size()) + " receive counts");
  // Apart from pipeline channels, permutes and Gloo's membership proofs.
  constexpr int64_t kChannel = (int64_t(1) << 40) + 2;
  size_t width = dtypeBytes(dtype);
  const char *in = static_cast<const char *>(input);
  char *out = static_cast<char *>(output);
  std::vector<std::unique_ptr<PendingTransfer>> transfers;
  int64_t sent = 0, received = 0;
  if (sendCounts[self] != recvCounts[self])
    return Status::error("all_to_all_v: this rank sends itself " +
                         std::to_string(sendCounts[self]) +
                         " elements but expects " +
                         std::to_string(recvCounts[self]));
  for (int64_t member = 0; member < size; ++member) {
    if (member == self) {
      std::memcpy(out + received * width, in + sent * width,
                  sendCounts[member] * width);
    } else {
      if (recvCounts[member] > 0) {
        StatusOr<std::unique_ptr<PendingTransfer>> receive =
            startRecv(axes, out + received * width, recvCounts[member], dtype,
                      member, kChannel);
        if (!receive.ok())
          return receive.status();
        transfers.push_back(std::move(*receive));
      }
      if (sendCounts[member] > 0) {
        StatusOr<std::unique_ptr<PendingTransfer>> send =
            startSend(axes, in + sent * width, sendCounts[member], dtype,
                      member, kChannel);
        if (!send.ok())
          return send.status();
        transfers.push_back(std::move(*send));
      }
    }
    sent += sendCounts[member];
    received += recvCounts[member];
  }
  for (std::unique_ptr<PendingTransfer> &transfer : transfers)
    TRELLIS_RETURN_IF_ERROR(transfer->wait());
  return Status::success();
}

} // namespace trellis::runtime
