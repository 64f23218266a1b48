//===- ForwardingDevice.h - A device that forwards to another --*- C++ -*-===//
//
// Tests derive from it to observe or change one behaviour of a real device
// (the CPU's) and forward the rest.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_UNITTESTS_RUNTIME_FORWARDINGDEVICE_H
#define TRELLIS_UNITTESTS_RUNTIME_FORWARDINGDEVICE_H

#include "trellis/Runtime/Backend.h"

namespace trellis::runtime {

class ForwardingDevice : public Device {
public:
  explicit ForwardingDevice(std::unique_ptr<Device> device)
      : device_(std::move(device)) {}

  std::string name() const override { return device_->name(); }
  bool hostAddressable() const override { return device_->hostAddressable(); }
  MemoryBudget memoryBudget() const override { return device_->memoryBudget(); }
  StatusOr<std::unique_ptr<DeviceAllocation>> allocate(int64_t bytes) override {
    return device_->allocate(bytes);
  }
  Status copyToHost(const Tensor &source, void *host) override {
    return device_->copyToHost(source, host);
  }
  Status copyFromHost(const void *host, Tensor &target) override {
    return device_->copyFromHost(host, target);
  }
  Status copy(const Tensor &source, Tensor &target) override {
    return device_->copy(source, target);
  }
  bool hasKernel(const std::string &op) const override {
    return device_->hasKernel(op);
  }
  StatusOr<std::unique_ptr<PreparedLaunch>>
  prepare(const KernelArgs &args) override {
    return device_->prepare(args);
  }
  Status launch(const KernelArgs &args) override {
    return device_->launch(args);
  }
  Status launchUpdates(const std::vector<KernelArgs> &updates) override {
    return device_->launchUpdates(updates);
  }
  Status runCollective(const KernelArgs &args) override {
    return device_->runCollective(args);
  }
  int64_t enqueueCommunication(std::function<Status()> work) override {
    return device_->enqueueCommunication(std::move(work));
  }
  Status waitCommunication(int64_t event) override {
    return device_->waitCommunication(event);
  }
  Status synchronize() override { return device_->synchronize(); }

  /// A new CPU device.
  static std::unique_ptr<Device> cpu() {
    return std::move(*(*findBackend("cpu"))->createDevice({}));
  }

private:
  std::unique_ptr<Device> device_;
};

} // namespace trellis::runtime

#endif // TRELLIS_UNITTESTS_RUNTIME_FORWARDINGDEVICE_H
