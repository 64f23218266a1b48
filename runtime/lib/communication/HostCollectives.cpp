//===- HostCollectives.cpp - Exchanges of host values between ranks -------===//

#include "trellis/Runtime/HostCollectives.h"

namespace trellis::runtime {

namespace {

/// `count` f32 of device memory, seen as a tensor.
struct DeviceValues {
  std::unique_ptr<DeviceAllocation> allocation;
  Tensor tensor;
};

StatusOr<DeviceValues> allocateValues(Device &device, int64_t count) {
  StatusOr<std::unique_ptr<DeviceAllocation>> allocation =
      device.allocate(count * static_cast<int64_t>(sizeof(float)));
  if (!allocation.ok())
    return allocation.status().withContext("staging host values");
  DeviceValues values;
  values.tensor =
      Tensor(BufferDesc{{count}, DType::F32}, (*allocation)->data());
  values.allocation = std::move(*allocation);
  return values;
}

/// Runs `exchange` on the communication stream and waits for it.
Status exchangeOnStream(Device &device, std::function<Status()> exchange) {
  return device.waitCommunication(
      device.enqueueCommunication(std::move(exchange)));
}

} // namespace

Status allReduceHostValues(Device &device, Communicator &comm,
                           const AxisList &axes, float *values, int64_t count,
                           ReduceKind kind) {
  if (device.hostAddressable())
    return comm.allReduce(axes, values, count, DType::F32, kind);
  StatusOr<DeviceValues> staged = allocateValues(device, count);
  if (!staged.ok())
    return staged.status();
  Tensor &tensor = staged->tensor;
  TRELLIS_RETURN_IF_ERROR(device.copyFromHost(values, tensor));
  TRELLIS_RETURN_IF_ERROR(exchangeOnStream(device, [&]() {
    return comm.allReduce(axes, tensor.raw(), count, DType::F32, kind);
  }));
  return device.copyToHost(tensor, values);
}

Status allGatherHostValues(Device &device, Communicator &comm,
                           const AxisList &axes, const float *input,
                           float *output, int64_t count) {
  if (device.hostAddressable())
    return comm.allGather(axes, input, output, count, DType::F32);
  int64_t members = comm.groupSize(axes);
  StatusOr<DeviceValues> mine = allocateValues(device, count);
  if (!mine.ok())
    return mine.status();
  StatusOr<DeviceValues> all = allocateValues(device, count * members);
  if (!all.ok())
    return all.status();
  TRELLIS_RETURN_IF_ERROR(device.copyFromHost(input, mine->tensor));
  TRELLIS_RETURN_IF_ERROR(exchangeOnStream(device, [&]() {
    return comm.allGather(axes, mine->tensor.raw(), all->tensor.raw(), count,
                          DType::F32);
  }));
  return device.copyToHost(all->tensor, output);
}

} // namespace trellis::runtime
