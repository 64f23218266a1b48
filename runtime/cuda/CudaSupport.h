//===- CudaSupport.h - What the CUDA backend's files share ------*- C++ -*-===//
//
// Errors of the CUDA runtime as Statuses, the per-device context kernels
// launch with, and the kernel table by op id.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_CUDASUPPORT_H
#define TRELLIS_RUNTIME_CUDA_CUDASUPPORT_H

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/KernelRegistry.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace trellis::runtime::cuda {

/// "cuda: <what>: <the runtime's description of error>".
Status cudaFailure(const std::string &what, cudaError_t error);

#define TRELLIS_CUDA_RETURN_IF_ERROR(call, what)                               \
  do {                                                                         \
    if (cudaError_t trellisCudaError = (call);                                 \
        trellisCudaError != cudaSuccess)                                       \
      return ::trellis::runtime::cuda::cudaFailure(what, trellisCudaError);    \
  } while (0)

class CublasLt;

/// Events that order streams, made once and reused: `take` makes one when
/// none is free; `give` returns one whose last record every wait on it has
/// already been enqueued for (a wait holds the record it was enqueued
/// after, so the event may be recorded again).
class EventPool {
public:
  EventPool() = default;
  EventPool(const EventPool &) = delete;
  EventPool &operator=(const EventPool &) = delete;
  ~EventPool() {
    for (cudaEvent_t event : free_)
      cudaEventDestroy(event);
  }
  cudaEvent_t take() {
    cudaEvent_t event = nullptr;
    if (!free_.empty()) {
      event = free_.back();
      free_.pop_back();
    } else {
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    }
    return event;
  }
  void give(cudaEvent_t event) { free_.push_back(event); }

private:
  std::vector<cudaEvent_t> free_;
};

/// What a stream-ordered communicator (NCCL) needs of its CUDA device.
class CudaStreams {
public:
  using Watchdog =
      std::function<Status(std::chrono::steady_clock::duration waited)>;
  virtual ~CudaStreams() = default;
  /// The stream kernels run on: transfers start after the compute launched
  /// before them and make later compute wait for them.
  virtual cudaStream_t computeStream() const = 0;
  /// The stream collectives enqueue on.
  virtual cudaStream_t communicationStream() const = 0;
  /// While the host waits for the device, `watchdog` is called with how
  /// long it has waited; a failure ends the wait with it (null: none).
  virtual void watchCommunication(Watchdog watchdog) = 0;
  /// Waits on the host until the communication stream is idle (watched).
  virtual Status waitForCommunication() = 0;
};

/// Connects `rank` of `mesh` over NCCL on `device` (a CUDA device):
/// Backend::connect of the cuda backend.
StatusOr<std::unique_ptr<Communicator>>
connectNccl(Device &device, const Mesh &mesh, int64_t rank,
            const std::vector<AxisList> &groups,
            const std::vector<TransferLink> &links,
            const RendezvousOptions &options);

/// What a kernel launches with: the device's compute stream and its
/// libraries.
struct CudaContext {
  cudaStream_t stream = nullptr;
  CublasLt *blas = nullptr;
  /// cuBLASLt's workspace.
  void *workspace = nullptr;
  int64_t workspaceBytes = 0;
  /// Runs a kernel's own exchange (a vocabulary-split loss's all-reduces)
  /// on the communication stream, after the compute launched before it;
  /// later compute waits for it.
  std::function<Status(std::function<Status()>)> exchange;
  /// Waits on the host for everything launched on `stream` (watched like
  /// the device's other waits: a dead peer fails it): for the few kernels
  /// whose host work needs a value the device made (the all-to-all
  /// dispatch's counts).
  std::function<Status(const std::string &what)> waitOnHost;
};

/// A kernel of the CUDA backend: enqueues `args`' instruction on
/// `context.stream` (it may return before the work ran).
using CudaKernel = Status (*)(const KernelArgs &args, CudaContext &context);
/// What a kernel decides once per instruction (CudaDevice::prepare), or
/// null when it decides nothing.
using CudaPrepare = StatusOr<std::unique_ptr<PreparedLaunch>> (*)(
    const KernelArgs &args, CudaContext &context);

/// Whether a kernel's host work waits for a value the step computes (the
/// all-to-all dispatch's counts), so that a CUDA graph cannot record it.
using CudaWaitsOnHost = bool (*)(const KernelArgs &args);

/// The row of the instruction a kernel runs (found when the plan loaded):
/// kernels read their member and facts from it.
inline const OpContract &rowOf(const KernelArgs &args) {
  return args.instruction.row();
}

/// A kernel, what it decides once per instruction (null: nothing), and
/// whether its host work waits on the step (null: never).
struct CudaKernelEntry {
  CudaKernel run = nullptr;
  CudaPrepare prepare = nullptr;
  CudaWaitsOnHost waitsOnHost = nullptr;
};

/// The backend's kernels by op id (KernelRegistry.h); each kernel file
/// registers the families and members it runs.
using CudaKernelTable = KernelRegistry<CudaKernelEntry>;

/// Every kernel of the backend.
const CudaKernelTable &cudaKernels();

/// Kernel files' registrations (gathered by cudaKernels()).
void registerMatmulKernels(CudaKernelTable &table);
void registerElementwiseKernels(CudaKernelTable &table);
void registerLayoutKernels(CudaKernelTable &table);
void registerReductionKernels(CudaKernelTable &table);
void registerRowKernels(CudaKernelTable &table);
void registerOptimizerKernels(CudaKernelTable &table);
void registerEmbeddingKernels(CudaKernelTable &table);
void registerCrossEntropyKernels(CudaKernelTable &table);
void registerFusedElementwiseKernels(CudaKernelTable &table);
void registerAttentionKernels(CudaKernelTable &table);
void registerExpertKernels(CudaKernelTable &table);

/// A run of adamw / sgd updates as one multi-tensor launch.
Status launchOptimizers(const std::vector<KernelArgs> &updates,
                        CudaContext &context);

/// target[i] = a[i] (kind) b[i] over `count` elements of `dtype` on
/// `stream` (16-bit values combine in fp32 and round to nearest even).
Status launchReduceElements(DType dtype, ReduceKind kind, void *target,
                            const void *a, const void *b, int64_t count,
                            cudaStream_t stream);

/// Writes to `flag` (one int32 in device memory, zeroed by the caller)
/// the index + 1 of the first of `tensors` holding a value that is not
/// finite, or leaves it 0: one kernel per tensor, in order, on `stream`.
Status launchFirstNonFinite(const std::vector<const Tensor *> &tensors,
                            int32_t *flag, cudaStream_t stream);

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_CUDASUPPORT_H
