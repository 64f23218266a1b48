//===- CudaBackend.cpp - NVIDIA GPUs as devices ---------------------------===//
//
// Memory is device memory (cudaMalloc, zeroed when allocated); the compute
// stream and the communication stream are CUDA streams, ordered by events
// and never by host waits: enqueueCommunication makes the communication
// stream wait for the compute launched before it and runs its work, which
// enqueues there; waitCommunication makes the compute stream wait for it.
// The host waits only to read values back (copyToHost, the finiteness
// verdict) and in synchronize().
//
//===----------------------------------------------------------------------===//

#include "CudaBackend.h"

#include "CublasLt.h"
#include "CudaSupport.h"

#include "trellis/Runtime/CollectiveLowering.h"

#include <optional>
#include <string>
#include <thread>

namespace trellis::runtime::cuda {

Status cudaFailure(const std::string &what, cudaError_t error) {
  return Status::error("cuda: " + what + ": " + cudaGetErrorString(error));
}

namespace {

/// cuBLASLt's workspace (NVIDIA recommends 32 MiB on Hopper).
constexpr int64_t kWorkspaceBytes = int64_t(32) << 20;

std::string mebibytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  return text;
}

/// The moves of device memory the collective lowering packs with, all on
/// the communication stream.
class DeviceCollectiveMemory : public CollectiveMemory {
public:
  explicit DeviceCollectiveMemory(cudaStream_t stream) : stream_(stream) {}

  StatusOr<std::unique_ptr<DeviceAllocation>> scratch(int64_t bytes) override {
    void *data = nullptr;
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMallocAsync(&data, std::max<int64_t>(bytes, 1), stream_),
        "allocating " + mebibytes(bytes) + " of scratch for a collective");
    // Scratch from the stream-ordered allocator, freed in stream order.
    cudaStream_t stream = stream_;
    return ReleasedAllocation::make(
        data, bytes, [stream](void *memory) { cudaFreeAsync(memory, stream); });
  }
  Status copyRows(void *target, int64_t targetStride, const void *source,
                  int64_t sourceStride, int64_t rowBytes,
                  int64_t rows) override {
    if (rows == 0 || rowBytes == 0)
      return Status::success();
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2DAsync(target, targetStride, source, sourceStride, rowBytes,
                          rows, cudaMemcpyDeviceToDevice, stream_),
        "copying rows for a collective");
    return Status::success();
  }
  Status reduce(DType dtype, ReduceKind kind, void *target, const void *a,
                const void *b, int64_t count) override {
    return launchReduceElements(dtype, kind, target, a, b, count, stream_);
  }

private:
  cudaStream_t stream_;
};

/// A step recorded as a CUDA graph, instantiated.
class CudaGraph : public RecordedStep {
public:
  explicit CudaGraph(cudaGraphExec_t graph) : graph(graph) {}
  ~CudaGraph() override { cudaGraphExecDestroy(graph); }
  cudaGraphExec_t graph;
};

/// A compute instruction's kernel and what it decided when prepared.
class CudaLaunch : public PreparedLaunch {
public:
  CudaKernel kernel = nullptr;
  std::unique_ptr<PreparedLaunch> decided;
};

class CudaDevice : public Device, public CudaStreams {
public:
  ~CudaDevice() override {
    (void)synchronize();
    if (flag_)
      cudaFree(flag_);
    if (context_.workspace)
      cudaFree(context_.workspace);
    blas_.reset();
    if (communication_)
      cudaStreamDestroy(communication_);
    if (context_.stream)
      cudaStreamDestroy(context_.stream);
  }

  static StatusOr<std::unique_ptr<CudaDevice>>
  create(const DeviceOptions &options) {
    std::unique_ptr<CudaDevice> device(new CudaDevice(options));
    TRELLIS_RETURN_IF_ERROR(device->initialize());
    return device;
  }

  std::string name() const override { return "cuda"; }

  cudaStream_t computeStream() const override { return context_.stream; }
  cudaStream_t communicationStream() const override { return communication_; }
  void watchCommunication(Watchdog watchdog) override {
    watchdog_ = std::move(watchdog);
  }
  Status waitForCommunication() override {
    return waitStream(communication_, "the communication stream");
  }

  MemoryBudget memoryBudget() const override {
    size_t free = 0, total = 0;
    MemoryBudget budget;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess)
      return budget;
    budget.bytes = static_cast<int64_t>(free);
    budget.source = "free memory of GPU " + std::to_string(ordinal_) + " (" +
                    mebibytes(static_cast<int64_t>(free)) + " of " +
                    mebibytes(static_cast<int64_t>(total)) + ")";
    if (options_.maxMemoryBytes > 0 && options_.maxMemoryBytes < budget.bytes) {
      budget.bytes = options_.maxMemoryBytes;
      budget.source = "--max-memory";
    }
    return budget;
  }

  StatusOr<std::unique_ptr<DeviceAllocation>> allocate(int64_t bytes) override {
    void *data = nullptr;
    int64_t size = std::max<int64_t>(bytes, 1);
    if (cudaError_t error = cudaMalloc(&data, size); error != cudaSuccess) {
      cudaGetLastError(); // clear the sticky-free error state
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      return Status::error("cuda: cannot allocate " + mebibytes(bytes) +
                           " on GPU " + std::to_string(ordinal_) + " (" +
                           mebibytes(static_cast<int64_t>(free)) + " free of " +
                           mebibytes(static_cast<int64_t>(total)) +
                           "): " + cudaGetErrorString(error));
    }
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(data, 0, size, context_.stream), "zeroing memory");
    return ReleasedAllocation::make(data, size,
                                    [](void *memory) { cudaFree(memory); });
  }

  Status copyToHost(const Tensor &source, void *host) override {
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, source.raw(), source.bytes(),
                        cudaMemcpyDeviceToHost, context_.stream),
        "copying to the host");
    return waitStream(context_.stream, "waiting for a copy to the host");
  }
  Status copyFromHost(const void *host, Tensor &target) override {
    // The host's bytes may go away on return: wait for the copy.
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(target.raw(), host, target.bytes(),
                        cudaMemcpyHostToDevice, context_.stream),
        "copying from the host");
    return waitStream(context_.stream, "waiting for a copy from the host");
  }
  Status copy(const Tensor &source, Tensor &target) override {
    if (source.bytes() != target.bytes())
      return Status::error("cuda: copy of " + std::to_string(source.bytes()) +
                           " bytes into a buffer of " +
                           std::to_string(target.bytes()));
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(target.raw(), source.raw(), source.bytes(),
                        cudaMemcpyDeviceToDevice, context_.stream),
        "copying on the device");
    return Status::success();
  }

  bool hasKernel(const std::string &op) const override {
    return cudaKernels().find(op) != nullptr;
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

  /// prepare() of an instruction that is resolved.
  StatusOr<std::unique_ptr<PreparedLaunch>>
  prepareResolved(const KernelArgs &args) {
    const CudaKernelEntry *entry = cudaKernels().find(rowOf(args).id);
    if (!entry)
      return Status::error("cuda: no kernel for '" + args.instruction.op +
                           "' yet (docs/Runtime.md lists the CUDA backend's "
                           "ops)");
    auto launch = std::make_unique<CudaLaunch>();
    launch->kernel = entry->run;
    if (entry->prepare) {
      StatusOr<std::unique_ptr<PreparedLaunch>> decided =
          entry->prepare(args, context_);
      if (!decided.ok())
        return decided.status();
      launch->decided = std::move(*decided);
    }
    return std::unique_ptr<PreparedLaunch>(std::move(launch));
  }

  /// launch() of an instruction that is resolved.
  Status launchResolved(const KernelArgs &args) {
    if (const auto *launch = dynamic_cast<const CudaLaunch *>(args.prepared)) {
      KernelArgs own = args;
      own.prepared = launch->decided.get();
      return launch->kernel(own, context_);
    }
    StatusOr<std::unique_ptr<PreparedLaunch>> prepared = prepareResolved(args);
    if (!prepared.ok())
      return prepared.status();
    KernelArgs once = args;
    once.prepared = prepared->get();
    return launchResolved(once);
  }

  Status launchUpdates(const std::vector<KernelArgs> &updates) override {
    for (const KernelArgs &update : updates)
      if (!update.instruction.parameters)
        return Device::launchUpdates(updates);
    // Each with what its kernel decided when prepared.
    std::vector<KernelArgs> own = updates;
    for (KernelArgs &args : own)
      if (const auto *launch = dynamic_cast<const CudaLaunch *>(args.prepared))
        args.prepared = launch->decided.get();
    return launchOptimizers(own, context_);
  }

  Status runCollective(const KernelArgs &args) override {
    return runResolved(args, [this](const KernelArgs &resolved) {
      return runtime::runCollective(resolved, collectiveMemory_);
    });
  }

  int64_t enqueueCommunication(std::function<Status()> work) override {
    // After the compute launched so far...
    cudaEvent_t computed = takeEvent();
    Status status = failed_ ? *failed_ : Status::success();
    if (status.ok()) {
      if (cudaError_t error = cudaEventRecord(computed, context_.stream);
          error != cudaSuccess)
        status = cudaFailure("recording an event", error);
      else if (cudaError_t error =
                   cudaStreamWaitEvent(communication_, computed, 0);
               error != cudaSuccess)
        status = cudaFailure("ordering communication after compute", error);
    }
    // ...the work enqueues on the communication stream (a stream-ordered
    // communicator), unless an earlier exchange failed: peers would wait
    // on it until their timeout.
    if (status.ok())
      status = work();
    cudaEvent_t communicated = takeEvent();
    if (status.ok())
      if (cudaError_t error = cudaEventRecord(communicated, communication_);
          error != cudaSuccess)
        status = cudaFailure("recording an event", error);
    if (!status.ok() && !failed_)
      failed_ = status;
    events_.push_back({communicated, status});
    return static_cast<int64_t>(events_.size()) - 1;
  }

  Status waitCommunication(int64_t event) override {
    for (int64_t e = waited_; e <= event && e < int64_t(events_.size()); ++e)
      if (!events_[e].status.ok())
        return events_[e].status;
    waited_ = std::max(waited_, event + 1);
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(context_.stream, events_[event].done, 0),
        "ordering compute after communication");
    return Status::success();
  }

  Status synchronize() override {
    Status status = failed_ ? *failed_ : Status::success();
    if (Status waited = waitStream(communication_, "the communication stream");
        !waited.ok() && status.ok())
      status = waited;
    if (Status waited = waitStream(context_.stream, "the compute stream");
        !waited.ok() && status.ok())
      status = waited;
    // Every event taken since the last synchronize (the recorded ones
    // among them) is done: back to the pool, each once.
    for (cudaEvent_t event : usedOrdering_)
      eventPool_.give(event);
    events_.clear();
    usedOrdering_.clear();
    waited_ = 0;
    failed_.reset();
    return status;
  }

  // Step recording: stream capture of the compute stream. The
  // communication stream and the transfers' streams join the capture
  // through the events that order them after compute, and rejoin it
  // through the waits of compute for them; the end of the recording makes
  // compute wait for the communication stream's last work, so the graph
  // holds the whole step. Scratch from the stream-ordered allocator
  // becomes the graph's own allocations.
  bool recordsSteps() const override { return true; }
  bool recordable(const KernelArgs &args) const override {
    const CudaKernelEntry *entry = cudaKernels().find(rowOf(args).id);
    return !entry || !entry->waitsOnHost || !entry->waitsOnHost(args);
  }
  Status beginRecording() override {
    if (failed_)
      return *failed_;
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(context_.stream,
                               cudaStreamCaptureModeThreadLocal),
        "starting to record the step as a CUDA graph");
    return Status::success();
  }
  StatusOr<std::unique_ptr<RecordedStep>> endRecording() override {
    cudaStreamCaptureStatus joined = cudaStreamCaptureStatusNone;
    cudaError_t error = cudaStreamIsCapturing(communication_, &joined);
    if (error == cudaSuccess && joined == cudaStreamCaptureStatusActive) {
      cudaEvent_t last = takeEvent();
      error = cudaEventRecord(last, communication_);
      if (error == cudaSuccess)
        error = cudaStreamWaitEvent(context_.stream, last, 0);
    }
    cudaGraph_t graph = nullptr;
    cudaError_t ended = cudaStreamEndCapture(context_.stream, &graph);
    if (error == cudaSuccess)
      error = ended;
    cudaGraphExec_t instance = nullptr;
    if (error == cudaSuccess)
      error = cudaGraphInstantiate(&instance, graph, 0);
    if (graph)
      cudaGraphDestroy(graph);
    TRELLIS_CUDA_RETURN_IF_ERROR(
        error, "recording the step as a CUDA graph (--cuda-graph=false "
               "launches each kernel instead)");
    return std::unique_ptr<RecordedStep>(std::make_unique<CudaGraph>(instance));
  }
  Status replay(const RecordedStep &step) override {
    const auto *graph = dynamic_cast<const CudaGraph *>(&step);
    if (!graph)
      return Status::error("cuda: the recorded step is not a CUDA graph");
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph->graph, context_.stream),
                                 "replaying the step's CUDA graph");
    return Status::success();
  }

  /// One flag on the device, tested by one kernel per tensor; one copy of
  /// it back.
  StatusOr<int64_t>
  firstNonFinite(const std::vector<const Tensor *> &tensors) override {
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(flag_, 0, sizeof(int32_t), context_.stream),
        "clearing the finiteness flag");
    TRELLIS_RETURN_IF_ERROR(
        launchFirstNonFinite(tensors, flag_, context_.stream));
    int32_t flag = 0;
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&flag, flag_, sizeof(flag),
                                                 cudaMemcpyDeviceToHost,
                                                 context_.stream),
                                 "reading the finiteness flag");
    TRELLIS_RETURN_IF_ERROR(
        waitStream(context_.stream, "waiting for the finiteness flag"));
    return static_cast<int64_t>(flag) - 1;
  }

private:
  explicit CudaDevice(const DeviceOptions &options)
      : options_(options), ordinal_(static_cast<int>(options.localRank)),
        collectiveMemory_(nullptr) {}

  Status initialize() {
    TRELLIS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_),
                                 "selecting GPU " + std::to_string(ordinal_));
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&context_.stream, cudaStreamNonBlocking),
        "creating the compute stream");
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&communication_, cudaStreamNonBlocking),
        "creating the communication stream");
    collectiveMemory_ = DeviceCollectiveMemory(communication_);
    const char *tf32 = std::getenv("TRELLIS_CUDA_TF32");
    StatusOr<std::unique_ptr<CublasLt>> blas =
        CublasLt::load(tf32 && std::string(tf32) == "1");
    if (!blas.ok())
      return blas.status();
    blas_ = std::move(*blas);
    context_.blas = blas_.get();
    context_.exchange = [this](std::function<Status()> work) {
      return waitCommunication(enqueueCommunication(std::move(work)));
    };
    context_.waitOnHost = [this](const std::string &what) {
      return waitStream(context_.stream, what);
    };
    context_.workspaceBytes = kWorkspaceBytes;
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&context_.workspace, kWorkspaceBytes),
        "allocating cuBLASLt's workspace");
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMalloc(reinterpret_cast<void **>(&flag_), sizeof(int32_t)),
        "allocating the finiteness flag");
    return Status::success();
  }

  /// Waits on the host until `stream` is idle; while a communicator
  /// watches (NCCL), polls its watchdog, so a dead peer fails the wait
  /// instead of hanging it.
  Status waitStream(cudaStream_t stream, const std::string &what) {
    if (!watchdog_) {
      TRELLIS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);
      return Status::success();
    }
    auto start = std::chrono::steady_clock::now();
    while (true) {
      cudaError_t state = cudaStreamQuery(stream);
      if (state == cudaSuccess)
        return Status::success();
      if (state != cudaErrorNotReady)
        return cudaFailure(what, state);
      TRELLIS_RETURN_IF_ERROR(
          watchdog_(std::chrono::steady_clock::now() - start));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  /// An event from the pool (made when the pool is empty); it returns to
  /// the pool at synchronize().
  cudaEvent_t takeEvent() {
    cudaEvent_t event = eventPool_.take();
    usedOrdering_.push_back(event);
    return event;
  }

  struct Recorded {
    cudaEvent_t done;
    Status status;
  };

  DeviceOptions options_;
  int ordinal_;
  CudaContext context_;
  cudaStream_t communication_ = nullptr;
  std::unique_ptr<CublasLt> blas_;
  DeviceCollectiveMemory collectiveMemory_;
  int32_t *flag_ = nullptr;
  std::vector<Recorded> events_;
  /// Events taken since the last synchronize (all of them, recorded ones
  /// included), and the free ones.
  std::vector<cudaEvent_t> usedOrdering_;
  EventPool eventPool_;
  int64_t waited_ = 0;
  std::optional<Status> failed_;
  Watchdog watchdog_;
};

class CudaBackend : public Backend {
public:
  std::string name() const override { return "cuda"; }
  std::string description() const override {
    return "NVIDIA GPUs, one per rank: cuBLASLt and Trellis kernels, NCCL";
  }

  StatusOr<std::unique_ptr<Device>>
  createDevice(const DeviceOptions &options) const override {
    int count = 0;
    if (cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess)
      return Status::error(
          std::string("--device cuda: no usable GPU on this machine "
                      "(cudaGetDeviceCount: ") +
          cudaGetErrorString(error) + "); use --device cpu");
    if (count == 0)
      return Status::error("--device cuda: this machine has no GPU; use "
                           "--device cpu");
    if (options.localRank >= count || options.ranksOnNode > count)
      return Status::error(
          "--device cuda: " + std::to_string(options.ranksOnNode) +
          " ranks on this node need a GPU each (local rank " +
          std::to_string(options.localRank) + " takes GPU " +
          std::to_string(options.localRank) + "), but it has " +
          std::to_string(count));
    StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::create(options);
    if (!device.ok())
      return device.status();
    return std::unique_ptr<Device>(std::move(*device));
  }

  StatusOr<std::unique_ptr<Communicator>>
  connect(Device &device, const Mesh &mesh, int64_t rank,
          const std::vector<AxisList> &groups,
          const std::vector<TransferLink> &links,
          const RendezvousOptions &options) const override {
    return connectNccl(device, mesh, rank, groups, links, options);
  }
};

} // namespace

const CudaKernelTable &cudaKernels() {
  static const CudaKernelTable table = [] {
    CudaKernelTable kernels;
    registerMatmulKernels(kernels);
    registerElementwiseKernels(kernels);
    registerLayoutKernels(kernels);
    registerReductionKernels(kernels);
    registerRowKernels(kernels);
    registerOptimizerKernels(kernels);
    registerEmbeddingKernels(kernels);
    registerCrossEntropyKernels(kernels);
    registerFusedElementwiseKernels(kernels);
    registerAttentionKernels(kernels);
    registerExpertKernels(kernels);
    return kernels;
  }();
  return table;
}

const Backend &backend() {
  static const CudaBackend instance;
  return instance;
}

} // namespace trellis::runtime::cuda
