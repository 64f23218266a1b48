//===- CpuBackend.cpp - The host as a device ------------------------------===//
//
// Memory is host memory (64-byte aligned, zeroed); the compute stream is the
// calling thread (launch() returns when the kernel finished); the
// communication stream is one worker thread running its work in order.
// Communicators are Gloo's.
//
//===----------------------------------------------------------------------===//

#include "CpuBackend.h"

#include "HostMemory.h"
#include "Kernels.h"

#include "../gloo/Gloo.h"
#include "trellis/Runtime/CollectiveLowering.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace trellis::runtime::cpu {

namespace {

constexpr int64_t kAlignment = 64;

/// The moves of host memory the collective lowering packs with.
class HostCollectiveMemory : public CollectiveMemory {
public:
  StatusOr<std::unique_ptr<DeviceAllocation>> scratch(int64_t bytes) override {
    // Contents undefined: not zeroed, unlike the plan's buffers.
    int64_t rounded = std::max<int64_t>(64, (bytes + 63) / 64 * 64);
    void *data = std::aligned_alloc(64, rounded);
    if (!data)
      return Status::error("cpu: cannot allocate " + std::to_string(bytes) +
                           " bytes of host memory for a collective");
    return ReleasedAllocation::make(data, bytes, std::free);
  }
  Status copyRows(void *target, int64_t targetStride, const void *source,
                  int64_t sourceStride, int64_t rowBytes,
                  int64_t rows) override {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char *>(target) + r * targetStride,
                  static_cast<const char *>(source) + r * sourceStride,
                  rowBytes);
    return Status::success();
  }
  Status reduce(DType dtype, ReduceKind kind, void *target, const void *a,
                const void *b, int64_t count) override {
    reduceElements(dtype, kind, target, a, b, count);
    return Status::success();
  }
};

/// Runs work in submission order on one thread; an event is the index of
/// its work. After a failure, later work is skipped and reports that
/// failure: peers would otherwise wait on it until their timeout.
class CommunicationStream {
public:
  CommunicationStream() : thread_([this] { loop(); }) {}
  ~CommunicationStream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }

  int64_t submit(std::function<Status()> work) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
    results_.push_back(std::nullopt);
    ready_.notify_all();
    return static_cast<int64_t>(results_.size()) - 1;
  }

  /// Waits until all work up to `event` ran; returns the first failure.
  Status waitFor(int64_t event) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return completed_ > event; });
    for (int64_t e = waited_; e <= event; ++e)
      if (!results_[e]->ok())
        return *results_[e];
    waited_ = std::max(waited_, event + 1);
    return Status::success();
  }

  /// Waits for everything submitted; then forgets it.
  Status drain() {
    int64_t last;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last = static_cast<int64_t>(results_.size()) - 1;
    }
    Status status = last >= 0 ? waitFor(last) : Status::success();
    std::lock_guard<std::mutex> lock(mutex_);
    results_.clear();
    completed_ = 0;
    waited_ = 0;
    failed_.reset();
    return status;
  }

private:
  void loop() {
    while (true) {
      std::function<Status()> work;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty())
          return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      Status status = failed_ ? *failed_ : work();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!status.ok() && !failed_)
          failed_ = status;
        results_[completed_] = status;
        ++completed_;
      }
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_, done_;
  std::deque<std::function<Status()>> queue_;
  std::vector<std::optional<Status>> results_;
  int64_t completed_ = 0, waited_ = 0;
  std::optional<Status> failed_;
  bool stopping_ = false;
  std::thread thread_;
};

class CpuDevice : public Device {
public:
  explicit CpuDevice(const DeviceOptions &options) : options_(options) {}
  std::string name() const override { return "cpu"; }
  bool hostAddressable() const override { return true; }

  MemoryBudget memoryBudget() const override {
    return hostMemoryBudget(options_);
  }

  StatusOr<std::unique_ptr<DeviceAllocation>>
  allocate(int64_t bytes) override {
    int64_t rounded =
        std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment *
                                          kAlignment);
    void *data = std::aligned_alloc(kAlignment, rounded);
    if (!data)
      return Status::error("cpu: cannot allocate " + std::to_string(bytes) +
                           " bytes (" + std::to_string(bytes >> 20) +
                           " MiB) of host memory");
    std::memset(data, 0, rounded);
    return ReleasedAllocation::make(data, rounded, std::free);
  }

  Status copyToHost(const Tensor &source, void *host) override {
    std::memcpy(host, source.raw(), source.bytes());
    return Status::success();
  }
  Status copyFromHost(const void *host, Tensor &target) override {
    std::memcpy(target.raw(), host, target.bytes());
    return Status::success();
  }
  Status copy(const Tensor &source, Tensor &target) override {
    if (source.bytes() != target.bytes())
      return Status::error("cpu: copy of " + std::to_string(source.bytes()) +
                           " bytes into a buffer of " +
                           std::to_string(target.bytes()));
    std::memcpy(target.raw(), source.raw(), source.bytes());
    return Status::success();
  }

  bool hasKernel(const std::string &op) const override {
    return findKernel(op) != nullptr;
  }
  StatusOr<std::unique_ptr<PreparedLaunch>>
  prepare(const KernelArgs &args) override {
    return runResolved(args, [this](const KernelArgs &resolved) {
      return prepareResolved(resolved);
    });
  }

  Status launch(const KernelArgs &args) override {
    return runResolved(args, [this](const KernelArgs &resolved) {
      return launchResolved(resolved);
    });
  }

  Status launchUpdates(const std::vector<KernelArgs> &updates) override {
    for (const KernelArgs &update : updates)
      if (!update.instruction.parameters)
        return Device::launchUpdates(updates);
    return runOptimizers(updates);
  }

  Status runCollective(const KernelArgs &args) override {
    return runResolved(args, [this](const KernelArgs &resolved) {
      return runtime::runCollective(resolved, collectiveMemory_);
    });
  }

  int64_t enqueueCommunication(std::function<Status()> work) override {
    if (!communication_)
      communication_ = std::make_unique<CommunicationStream>();
    return communication_->submit(std::move(work));
  }
  Status waitCommunication(int64_t event) override {
    return communication_ ? communication_->waitFor(event)
                          : Status::success();
  }
  Status synchronize() override {
    return communication_ ? communication_->drain() : Status::success();
  }

  /// In place, each tensor in chunks split over the threads (a GPT-2 124M
  /// step tests 124M parameters and 248M moments).
  StatusOr<int64_t>
  firstNonFinite(const std::vector<const Tensor *> &tensors) override {
    constexpr int64_t kChunk = int64_t(1) << 16;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const Tensor &tensor = *tensors[t];
      int64_t count = tensor.size(), chunks = (count + kChunk - 1) / kChunk;
      int64_t width = dtypeBytes(tensor.desc().dtype);
      const char *data = static_cast<const char *>(tensor.raw());
      bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (chunks > 1)
      for (int64_t c = 0; c < chunks; ++c) {
        int64_t first = c * kChunk;
        finite = allFiniteValues(tensor.desc().dtype, data + first * width,
                                 std::min(kChunk, count - first)) &&
                 finite;
      }
      if (!finite)
        return static_cast<int64_t>(t);
    }
    return int64_t(-1);
  }

private:
  StatusOr<std::unique_ptr<PreparedLaunch>>
  prepareResolved(const KernelArgs &args) {
    auto launch = std::make_unique<CpuLaunch>();
    bool narrowNative = false;
    launch->kernel = selectKernel(args, narrowNative);
    if (!launch->kernel)
      return Status::error("cpu: no kernel for '" + args.instruction.op + "'");
    // Most kernels compute in fp32: 16-bit operands go through fp32 copies.
    launch->throughFloatCopies = !narrowNative && hasNarrowOperands(args);
    if (launch->kernel == runFusedElementwise ||
        launch->kernel == runNarrowElementwise) {
      StatusOr<FusedProgram> program = parseProgramOf(args);
      if (!program.ok())
        return program.status();
      launch->program = std::move(*program);
    }
    return std::unique_ptr<PreparedLaunch>(std::move(launch));
  }

  Status launchResolved(const KernelArgs &args) {
    if (const auto *launch = static_cast<const CpuLaunch *>(args.prepared))
      return launch->throughFloatCopies ? runInFloat(args, launch->kernel)
                                        : launch->kernel(args);
    StatusOr<std::unique_ptr<PreparedLaunch>> prepared = prepareResolved(args);
    if (!prepared.ok())
      return prepared.status();
    KernelArgs once = args;
    once.prepared = prepared->get();
    return launchResolved(once);
  }

  DeviceOptions options_;
  HostCollectiveMemory collectiveMemory_;
  /// Started by the first communication: a plan without any needs no
  /// thread.
  std::unique_ptr<CommunicationStream> communication_;
};

class CpuBackend : public Backend {
public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "the host's cores: oneDNN and Trellis kernels, Gloo over TCP";
  }
  StatusOr<std::unique_ptr<Device>>
  createDevice(const DeviceOptions &options) const override {
    if (options.threads < 1)
      return Status::error("expected --threads >= 1, found " +
                           std::to_string(options.threads));
    omp_set_num_threads(options.threads); // oneDNN's and the kernels'

    return std::unique_ptr<Device>(std::make_unique<CpuDevice>(options));
  }
  StatusOr<std::unique_ptr<Communicator>>
  connect(Device &device, const Mesh &mesh, int64_t rank,
          const std::vector<AxisList> &groups,
          const std::vector<TransferLink> &links,
          const RendezvousOptions &options) const override {
    (void)device; // Gloo exchanges host memory, the CPU device's own.
    (void)links;  // Gloo tells transfers apart by their channel (tag).
    return connectGloo(mesh, rank, groups, options);
  }
};

} // namespace

const Backend &backend() {
  static const CpuBackend instance;
  return instance;
}

} // namespace trellis::runtime::cpu
