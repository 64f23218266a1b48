//===- Backend.h - The seam between the executor and a machine --*- C++ -*-===//
//
// After IREE's HAL driver/device split. A Backend (a driver: "cpu", later
// "cuda") makes Devices and Communicators; a Device is one rank's machine:
// memory, kernels, and two ordered streams of work, compute and
// communication.
//
// Stream semantics, which every backend keeps:
// - launch() runs an instruction on the compute stream, after everything
//   launched before it; it may return before the kernel finished.
// - enqueueCommunication() runs work on the communication stream, in
//   submission order, after the compute launched before it and
//   concurrently with compute launched later; it returns an event. The
//   work calls the rank's Communicator, which either completes each
//   exchange before returning (Gloo, host memory) or enqueues it on this
//   device's communication stream (a stream-ordered communicator, NCCL:
//   Backend::connect hands it the device).
// - waitCommunication(event) makes later compute wait until that work (and
//   all communication before it) completed, and reports its failure. The
//   CPU device blocks the host; a GPU device may make its compute stream
//   wait on an event instead.
// - synchronize() waits for both streams, returns the first failure, and
//   forgets the events: the next step starts clean.
// After a communication failure, later communication work is skipped and
// reports that failure, so no peer waits on it until a timeout.
//
// The executor only talks to this interface: adding a backend adds a
// folder under runtime/ and a line in lib/Backends.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_BACKEND_H
#define TRELLIS_RUNTIME_BACKEND_H

#include "trellis/Common/ExpertRouting.h"
#include "trellis/Runtime/Communicator.h"
#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Status.h"
#include "trellis/Runtime/Tensor.h"

#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <variant>
#include <vector>

namespace trellis::runtime {

/// Device memory; freed when destroyed.
class DeviceAllocation {
public:
  virtual ~DeviceAllocation() = default;
  /// The device address of the first byte (64-byte aligned).
  virtual void *data() = 0;
  virtual int64_t bytes() const = 0;
};

/// Memory handed back by `release(data)` when destroyed: what a backend's
/// allocator returns (std::free, cudaFree, a stream-ordered free).
class ReleasedAllocation : public DeviceAllocation {
public:
  ReleasedAllocation(void *data, int64_t bytes,
                     std::function<void(void *)> release)
      : data_(data), bytes_(bytes), release_(std::move(release)) {}
  ~ReleasedAllocation() override { release_(data_); }
  void *data() override { return data_; }
  int64_t bytes() const override { return bytes_; }

  /// As the DeviceAllocation a device returns.
  static std::unique_ptr<DeviceAllocation>
  make(void *data, int64_t bytes, std::function<void(void *)> release) {
    return std::make_unique<ReleasedAllocation>(data, bytes,
                                                std::move(release));
  }

private:
  void *data_;
  int64_t bytes_;
  std::function<void(void *)> release_;
};

/// What a device decided for one instruction once, before its first
/// launch (Device::prepare): its kernel, and the work that depends only on
/// the instruction and its buffers' types (a fused program parsed, a GEMM
/// algorithm chosen, a kernel compiled). Opaque to the executor.
class PreparedLaunch {
public:
  virtual ~PreparedLaunch() = default;
};

/// A step's launches as a device recorded them (Device::endRecording),
/// replayed at later steps: a CUDA graph. Opaque to the executor.
class RecordedStep {
public:
  virtual ~RecordedStep() = default;
};

/// The tensors an instruction's buffer ids name: a stage's buffers seen
/// through one micro-batch's binding (Plan::bindings: a plan-file id to
/// the buffer holding that micro-batch's value), or directly.
class BufferTable {
public:
  BufferTable(std::vector<Tensor> &tensors,
              const std::vector<int64_t> *binding = nullptr)
      : tensors_(&tensors), binding_(binding) {}
  Tensor &operator[](int64_t id) const {
    return (*tensors_)[binding_ ? (*binding_)[id] : id];
  }

private:
  std::vector<Tensor> *tensors_;
  const std::vector<int64_t> *binding_;
};

/// What one instruction's kernel sees: the instruction, the buffers its
/// ids name, its resolved mesh axes, the communicator for ops that are
/// split over mesh axes (a vocabulary-parallel loss), and what the device
/// prepared for it (null if nothing).
struct KernelArgs {
  const Instruction &instruction;
  BufferTable buffers;
  const AxisList &axes;
  Communicator *comm = nullptr;
  const PreparedLaunch *prepared = nullptr;

  const Tensor &in(size_t i) const { return buffers[instruction.inputs[i]]; }
  Tensor &out(size_t i) const { return buffers[instruction.outputs[i]]; }
};

/// Aborts naming `instruction`: its parameters are not `wanted`'s, or it
/// was never resolved (a kernel registered for another family, or an
/// instruction made outside a plan launched past runResolved).
[[noreturn]] void abortOnParameters(const Instruction &instruction,
                                    const char *wanted);

/// The instruction's attributes as its row decoded them: `P` is its
/// family's struct (OpParameters.h). Precondition: the instruction is
/// resolved (the plan loader resolves each; runResolved resolves others).
template <typename P> const P &parametersOf(const KernelArgs &args) {
  const P *parameters = args.instruction.parametersAs<P>();
  if (!parameters)
    abortOnParameters(args.instruction, typeid(P).name());
  return *parameters;
}

/// `run(args)` with `args`' instruction resolved: `args` itself when it
/// is (a plan's), else a resolved copy (an instruction made elsewhere:
/// tests, calibration). Backends call their kernels through it.
template <typename Run>
auto runResolved(const KernelArgs &args, Run &&run) -> decltype(run(args)) {
  if (args.instruction.parameters || !findOpContract(args.instruction.op))
    return run(args);
  Instruction resolved = args.instruction;
  resolved.resolve();
  KernelArgs own{resolved, args.buffers, args.axes, args.comm, args.prepared};
  return run(own);
}

/// The rank's position along `args.axes` (0 when the op is not split);
/// fails without a communicator for a split op.
StatusOr<int64_t> shardPosition(const KernelArgs &args);

/// The size of the group along `args.axes` (1 when the op is not split).
int64_t shardCount(const KernelArgs &args);

/// Ring attention's key block (attention_block, attention_block_grad): the
/// position in the group of the rank `shift` places before this one on
/// the ring, whose keys and values this rank holds at this step.
StatusOr<int64_t> ringSourcePosition(const KernelArgs &args);

/// A router's attributes (moe_route, moe_route_grad) as the op table's row
/// reads them, its expert count from the logits.
ExpertRouting expertRouting(const KernelArgs &args);

/// Options of a rank's device.
struct DeviceOptions {
  /// Threads for the device's kernels (CPU: oneDNN's and the kernels' own).
  int threads = 1;
  /// This rank's index among the ranks of its node (a GPU's ordinal).
  int64_t localRank = 0;
  /// Ranks sharing this node's memory (the launcher's --nproc).
  int64_t ranksOnNode = 1;
  /// Bytes this rank may allocate at most (--max-memory; 0: no limit but
  /// the device's).
  int64_t maxMemoryBytes = 0;
};

/// What a rank may allocate on its device, and where the figure comes
/// from (for messages).
struct MemoryBudget {
  /// -1: the device cannot tell.
  int64_t bytes = -1;
  /// E.g. "MemAvailable 20.1 GiB shared by 2 ranks" or "--max-memory".
  std::string source;
};

class Device {
public:
  virtual ~Device() = default;

  /// The bytes this rank may still allocate: its share of the device's
  /// free memory, within --max-memory. Asked once, before a plan's memory
  /// is allocated.
  virtual MemoryBudget memoryBudget() const { return MemoryBudget(); }

  /// The backend's name ("cpu").
  virtual std::string name() const = 0;

  /// Whether tensors' memory is host memory a caller may read and write
  /// directly between runs (a session's views of its parameters).
  virtual bool hostAddressable() const { return false; }

  /// `bytes` of zeroed memory (at least one byte is allocated), or an
  /// error naming the size when the device has no room.
  virtual StatusOr<std::unique_ptr<DeviceAllocation>>
  allocate(int64_t bytes) = 0;

  /// Copies all of `source` to host memory at `host` (`source.bytes()`
  /// bytes), after the work launched before.
  virtual Status copyToHost(const Tensor &source, void *host) = 0;
  /// Copies `target.bytes()` bytes from host memory into `target`.
  virtual Status copyFromHost(const void *host, Tensor &target) = 0;
  /// Copies `source` into `target` (same size) on the compute stream.
  virtual Status copy(const Tensor &source, Tensor &target) = 0;

  /// Whether `op` has a kernel on this device.
  virtual bool hasKernel(const std::string &op) const = 0;
  /// Prepares `args`' compute instruction once, when the plan is loaded:
  /// what every launch of it then reuses (KernelArgs::prepared), or a
  /// failure naming what this device cannot run. Launches of instructions
  /// without a prepared launch still work (tests, fp32 copies). By default
  /// nothing is kept.
  virtual StatusOr<std::unique_ptr<PreparedLaunch>>
  prepare(const KernelArgs &args) {
    (void)args;
    return std::unique_ptr<PreparedLaunch>();
  }
  /// Runs a compute instruction on the compute stream. Precondition: the
  /// plan loader validated it.
  virtual Status launch(const KernelArgs &args) = 0;
  /// Runs a run of optimizer updates (adamw or sgd instructions, each
  /// reading nothing another one writes) as one multi-tensor pass: the same
  /// results as launching each, with one parallel region over all their
  /// elements instead of one per parameter. By default, one after another.
  virtual Status launchUpdates(const std::vector<KernelArgs> &updates) {
    for (const KernelArgs &update : updates)
      if (Status status = launch(update); !status.ok())
        return status;
    return Status::success();
  }

  /// Runs a collective instruction (all_reduce, ..., send, recv) over
  /// `args.comm`: packing the device's buffers around the exchange. Called
  /// from communication work (or inline for a plan run without overlap).
  virtual Status runCollective(const KernelArgs &args) = 0;

  /// Runs `work` on the communication stream; returns its event.
  virtual int64_t enqueueCommunication(std::function<Status()> work) = 0;
  /// Orders later compute after the communication of `event`; its
  /// failure (or an earlier one's) is returned.
  virtual Status waitCommunication(int64_t event) = 0;
  /// Waits for both streams; returns the first failure; forgets events.
  virtual Status synchronize() = 0;

  /// Step recording: whether this device can record the work of a step
  /// (launches, communication work and the waits for it, issued between
  /// beginRecording and endRecording) and replay it as one (a CUDA graph).
  /// A replay runs the recorded kernels on the same buffers with the same
  /// arguments: whatever changes between steps must be in device memory.
  virtual bool recordsSteps() const { return false; }
  /// Whether `args`' instruction may be recorded: not when its host work
  /// reads a value the step computes (a recording would freeze the value
  /// of the step it was recorded in).
  virtual bool recordable(const KernelArgs &args) const {
    (void)args;
    return true;
  }
  /// From here until endRecording, the work issued is recorded, not run.
  virtual Status beginRecording() {
    return Status::error(name() + " devices record no steps");
  }
  /// Ends the recording: the recorded step, or why it cannot be replayed.
  virtual StatusOr<std::unique_ptr<RecordedStep>> endRecording() {
    return Status::error(name() + " devices record no steps");
  }
  /// Runs a recorded step after the work launched before it, as issuing
  /// its work again would.
  virtual Status replay(const RecordedStep &step) {
    (void)step;
    return Status::error(name() + " devices record no steps");
  }

  /// The index of the first of the float `tensors` holding a value that is
  /// not finite (an infinity or a NaN), or -1 when all are finite, after
  /// the work launched before. The trainer asks it once a step, of every
  /// update together: one verdict, one synchronization (a GPU computes the
  /// flags on the device and copies one number back). By default through
  /// host copies; a backend may test in place.
  virtual StatusOr<int64_t>
  firstNonFinite(const std::vector<const Tensor *> &tensors);
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  /// One line for `--help` and error messages.
  virtual std::string description() const = 0;
  /// This rank's device.
  virtual StatusOr<std::unique_ptr<Device>>
  createDevice(const DeviceOptions &options) const = 0;
  /// Connects `rank` of `mesh`, with communicators for the groups along
  /// every axis list in `groups` (and the whole mesh) and for the plan's
  /// point-to-point `links` (every rank's, sorted), exchanging buffers
  /// in `device`'s memory; a stream-ordered communicator enqueues on
  /// `device`'s communication stream, so `device` (made by this backend)
  /// outlives it.
  virtual StatusOr<std::unique_ptr<Communicator>>
  connect(Device &device, const Mesh &mesh, int64_t rank,
          const std::vector<AxisList> &groups,
          const std::vector<TransferLink> &links,
          const RendezvousOptions &options) const = 0;
};

/// The backends this runtime was built with, in a fixed order (the first
/// is the default).
const std::vector<const Backend *> &registeredBackends();

/// The backend named `name`, or an error listing the available ones.
StatusOr<const Backend *> findBackend(const std::string &name);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_BACKEND_H
