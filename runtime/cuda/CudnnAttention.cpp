//===- CudnnAttention.cpp - attention through cuDNN's SDPA ----------------===//
//
// cudnn-frontend's graph API with dynamic loading: cuDNN and the shared
// CUDA runtime are found as the other libraries are (CudaLibraries.h) and
// handed to the frontend, so nothing links against them. Tensors keep the
// plan's layout [batch, seq, heads, dim] through strides; the statistics
// (the rows' log-sum-exp) are [batch, heads, seq] in fp32.
//
//===----------------------------------------------------------------------===//

#include "CudnnAttention.h"

#include "CudaLibraries.h"

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

namespace cudnn_frontend {
// The frontend resolves cuDNN's entry points from this handle.
void *cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend

namespace trellis::runtime::cuda {

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t {
  kQuery = 1,
  kKey,
  kValue,
  kResult,
  kStatistics,
  kResultGrad,
  kQueryGrad,
  kKeyGrad,
  kValueGrad
};

/// cuDNN, opened once per process, and its handle.
struct CudnnRuntime {
  SharedLibrary cudnn, cudart;
  cudnnHandle_t handle = nullptr;
  /// Why cuDNN cannot be used here (empty when it can).
  std::string failure;
  std::mutex mutex;
};

std::string describe(const std::exception &error) {
  return std::string("cudnn-frontend: ") + error.what();
}

CudnnRuntime &cudnnRuntime() {
  static CudnnRuntime *runtime = [] {
    auto *made = new CudnnRuntime;
    StatusOr<SharedLibrary> cudnn = SharedLibrary::open(cudnnLibrary());
    StatusOr<SharedLibrary> cudart = SharedLibrary::open(cudartLibrary());
    if (!cudnn.ok() || !cudart.ok()) {
      made->failure = (cudnn.ok() ? cudart.status() : cudnn.status()).message();
      return made;
    }
    made->cudnn = std::move(*cudnn);
    made->cudart = std::move(*cudart);
    // The frontend's own CUDA calls go to this runtime, on this device.
    ::setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", made->cudart.path().c_str(), 0);
    int device = 0;
    using SetDevice = int (*)(int);
    SetDevice setDevice = nullptr;
    if (cudaGetDevice(&device) != cudaSuccess ||
        !loadSymbol(made->cudart, "cudaSetDevice", setDevice).ok() ||
        setDevice(device) != 0) {
      made->failure = "cannot select the device in " + made->cudart.path();
      return made;
    }
    fe::cudnn_dlhandle = made->cudnn.handle();
    try {
      if (fe::detail::create_handle(&made->handle) != CUDNN_STATUS_SUCCESS)
        made->failure = "cudnnCreate failed (" + made->cudnn.path() + ")";
    } catch (const std::exception &error) {
      made->failure = describe(error);
    }
    return made;
  }();
  return *runtime;
}

/// What a graph depends on.
struct AttentionShape {
  int64_t batch, seq, heads, kvHeads, dim;
  bool causal;
  float scale;
  DType dtype;
  /// A causal sliding window: each query sees its `window` latest keys,
  /// itself included (0: all earlier keys).
  int64_t window;
  auto key() const {
    return std::make_tuple(batch, seq, heads, kvHeads, dim, causal, scale,
                           static_cast<int>(dtype), window);
  }
  std::vector<int64_t> queryDims() const { return {batch, heads, seq, dim}; }
  std::vector<int64_t> queryStrides() const {
    return {seq * heads * dim, dim, heads * dim, 1};
  }
  std::vector<int64_t> kvDims() const { return {batch, kvHeads, seq, dim}; }
  std::vector<int64_t> kvStrides() const {
    return {seq * kvHeads * dim, dim, kvHeads * dim, 1};
  }
  std::vector<int64_t> statisticsDims() const { return {batch, heads, seq, 1}; }
  std::vector<int64_t> statisticsStrides() const {
    return {heads * seq, seq, 1, 1};
  }
};

using GraphPointer = std::shared_ptr<fe::graph::Graph>;
using TensorPointer = std::shared_ptr<fe::graph::Tensor_attributes>;

/// A built graph and the workspace it needs.
struct BuiltGraph {
  GraphPointer graph;
  int64_t workspace = 0;
};

Status check(fe::error_t error, const char *what) {
  if (error.is_good())
    return Status::success();
  return Status::error(std::string("cuDNN attention: ") + what + ": " +
                       error.get_message());
}

GraphPointer newGraph(const AttentionShape &shape) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph
      ->set_io_data_type(shape.dtype == DType::BF16 ? fe::DataType_t::BFLOAT16
                                                    : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

TensorPointer tensor(const GraphPointer &graph, const char *name, Uid uid,
                     std::vector<int64_t> dims, std::vector<int64_t> strides) {
  return graph->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim(std::move(dims))
                           .set_stride(std::move(strides)));
}

/// The query, key and value tensors of a graph.
std::tuple<TensorPointer, TensorPointer, TensorPointer>
operandTensors(const GraphPointer &graph, const AttentionShape &shape) {
  return {
      tensor(graph, "query", kQuery, shape.queryDims(), shape.queryStrides()),
      tensor(graph, "key", kKey, shape.kvDims(), shape.kvStrides()),
      tensor(graph, "value", kValue, shape.kvDims(), shape.kvStrides())};
}

Status build(const GraphPointer &graph, cudnnHandle_t handle,
             BuiltGraph &built) {
  TRELLIS_RETURN_IF_ERROR(check(graph->validate(), "validate"));
  TRELLIS_RETURN_IF_ERROR(check(graph->build_operation_graph(handle),
                                "building the operation graph"));
  TRELLIS_RETURN_IF_ERROR(
      check(graph->create_execution_plans({fe::HeurMode_t::A}), "planning"));
  TRELLIS_RETURN_IF_ERROR(
      check(graph->check_support(handle), "checking support"));
  TRELLIS_RETURN_IF_ERROR(
      check(graph->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
            "building plans"));
  TRELLIS_RETURN_IF_ERROR(check(graph->get_workspace_size(built.workspace),
                                "sizing the workspace"));
  built.graph = graph;
  return Status::success();
}

/// The forward: result (and statistics when `statistics`).
Status buildForward(const AttentionShape &shape, bool statistics,
                    cudnnHandle_t handle, BuiltGraph &built) {
  GraphPointer graph = newGraph(shape);
  auto [q, k, v] = operandTensors(graph, shape);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_generate_stats(statistics)
                     .set_attn_scale(shape.scale);
  if (shape.causal)
    options.set_causal_mask(true);
  // Keys j with j + window > i: the window's keys, the query's own included
  // (the diagonal band's left bound, top-left aligned as the causal mask).
  if (shape.window > 0)
    options.set_diagonal_band_left_bound(static_cast<int>(shape.window));
  auto [result, stats] = graph->sdpa(q, k, v, options);
  result->set_output(true)
      .set_uid(kResult)
      .set_dim(shape.queryDims())
      .set_stride(shape.queryStrides());
  if (statistics)
    stats->set_output(true)
        .set_uid(kStatistics)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(shape.statisticsDims())
        .set_stride(shape.statisticsStrides());
  return build(graph, handle, built);
}

Status buildBackward(const AttentionShape &shape, cudnnHandle_t handle,
                     BuiltGraph &built) {
  GraphPointer graph = newGraph(shape);
  auto [q, k, v] = operandTensors(graph, shape);
  TensorPointer o =
      tensor(graph, "result", kResult, shape.queryDims(), shape.queryStrides());
  TensorPointer dO = tensor(graph, "result_grad", kResultGrad,
                            shape.queryDims(), shape.queryStrides());
  TensorPointer stats =
      tensor(graph, "statistics", kStatistics, shape.statisticsDims(),
             shape.statisticsStrides());
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_grad")
                     .set_attn_scale(shape.scale);
  if (shape.causal)
    options.set_causal_mask(true);
  if (shape.window > 0)
    options.set_diagonal_band_left_bound(static_cast<int>(shape.window));
  auto [dQ, dK, dV] = graph->sdpa_backward(q, k, v, o, dO, stats, options);
  dQ->set_output(true)
      .set_uid(kQueryGrad)
      .set_dim(shape.queryDims())
      .set_stride(shape.queryStrides());
  dK->set_output(true)
      .set_uid(kKeyGrad)
      .set_dim(shape.kvDims())
      .set_stride(shape.kvStrides());
  dV->set_output(true)
      .set_uid(kValueGrad)
      .set_dim(shape.kvDims())
      .set_stride(shape.kvStrides());
  return build(graph, handle, built);
}

/// An instruction's graphs: the forward alone (attention), or the forward
/// with statistics and the backward (attention_grad).
class CudnnAttentionLaunch : public PreparedLaunch {
public:
  std::shared_ptr<const BuiltGraph> forward, backward;
  AttentionShape shape{};
};

using GraphKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                            float, int, int64_t, int>;

/// Graphs by shape and kind, shared by every instruction of that shape.
std::map<GraphKey, std::shared_ptr<const BuiltGraph>> &graphCache() {
  static auto *cache =
      new std::map<GraphKey, std::shared_ptr<const BuiltGraph>>;
  return *cache;
}

/// `kind` 0: forward, 1: forward with statistics, 2: backward.
StatusOr<std::shared_ptr<const BuiltGraph>>
cachedGraph(const AttentionShape &shape, int kind, CudnnRuntime &runtime) {
  GraphKey key = std::tuple_cat(shape.key(), std::make_tuple(kind));
  auto found = graphCache().find(key);
  if (found != graphCache().end())
    return found->second;
  auto built = std::make_shared<BuiltGraph>();
  Status status = Status::success();
  try {
    status = kind == 2 ? buildBackward(shape, runtime.handle, *built)
                       : buildForward(shape, kind == 1, runtime.handle, *built);
  } catch (const std::exception &error) {
    status = Status::error(describe(error));
  }
  if (!status.ok())
    return status;
  graphCache().emplace(key, built);
  return std::shared_ptr<const BuiltGraph>(built);
}

/// The shape of `args` when cuDNN's attention covers it.
std::optional<AttentionShape> coveredShape(const KernelArgs &args) {
  const std::vector<int64_t> &qs = args.in(0).shape(), &ks = args.in(1).shape();
  DType dtype = args.in(0).desc().dtype;
  if (dtype != DType::BF16 && dtype != DType::F16)
    return std::nullopt;
  int64_t dim = qs[3];
  if (dim > 128 || dim % 8 != 0 || qs[1] != ks[1] || qs[0] != ks[0])
    return std::nullopt;
  const AttentionParameters &parameters =
      parametersOf<AttentionParameters>(args);
  StatusOr<int64_t> position = shardPosition(args);
  // Soft-capping, ALiBi and sinks run on the CUDA-core kernels.
  if (!position.ok() || *position != 0 || parameters.chunks > 1 ||
      parameters.softcap > 0 || parameters.slopesOperand >= 0 ||
      parameters.sinksOperand >= 0)
    return std::nullopt;
  bool causal = parameters.causal;
  // A window as long as the sequence masks nothing; without causality the
  // kernels apply none.
  int64_t window = parameters.window;
  if (!causal || window >= qs[1])
    window = 0;
  return AttentionShape{qs[0],
                        qs[1],
                        qs[2],
                        ks[2],
                        dim,
                        causal,
                        static_cast<float>(parameters.scale),
                        dtype,
                        window};
}

Status execute(const BuiltGraph &built, CudnnRuntime &runtime,
               std::unordered_map<int64_t, void *> &pointers, void *workspace) {
  try {
    return check(built.graph->execute(runtime.handle, pointers, workspace),
                 "executing");
  } catch (const std::exception &error) {
    return Status::error(describe(error));
  }
}

} // namespace

std::unique_ptr<PreparedLaunch>
prepareCudnnAttention(const KernelArgs &args, CudaContext &, std::string &why) {
  why.clear();
  if (const char *setting = std::getenv("TRELLIS_CUDNN_ATTENTION");
      setting && std::string(setting) == "0")
    return nullptr;
  std::optional<AttentionShape> shape = coveredShape(args);
  if (!shape)
    return nullptr;
  CudnnRuntime &runtime = cudnnRuntime();
  if (!runtime.failure.empty()) {
    why = runtime.failure;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(runtime.mutex);
  auto launch = std::make_unique<CudnnAttentionLaunch>();
  launch->shape = *shape;
  bool gradient = rowOf(args).gradient;
  StatusOr<std::shared_ptr<const BuiltGraph>> forward =
      cachedGraph(*shape, gradient ? 1 : 0, runtime);
  if (!forward.ok()) {
    why = forward.status().message();
    return nullptr;
  }
  launch->forward = *forward;
  if (gradient) {
    StatusOr<std::shared_ptr<const BuiltGraph>> backward =
        cachedGraph(*shape, 2, runtime);
    if (!backward.ok()) {
      why = backward.status().message();
      return nullptr;
    }
    launch->backward = *backward;
  }
  return launch;
}

bool isCudnnAttention(const PreparedLaunch *prepared) {
  return dynamic_cast<const CudnnAttentionLaunch *>(prepared) != nullptr;
}

Status runCudnnAttention(const PreparedLaunch &prepared, const KernelArgs &args,
                         CudaContext &context) {
  const auto &launch = static_cast<const CudnnAttentionLaunch &>(prepared);
  CudnnRuntime &runtime = cudnnRuntime();
  std::lock_guard<std::mutex> lock(runtime.mutex);
  cudaStream_t stream = context.stream;
  try {
    if (fe::detail::set_stream(runtime.handle, stream) != CUDNN_STATUS_SUCCESS)
      return Status::error("cuDNN attention: cudnnSetStream failed");
  } catch (const std::exception &error) {
    return Status::error(describe(error));
  }
  // cuDNN's variant pack takes every pointer as writable.
  auto operand = [&](int i) { return const_cast<void *>(args.in(i).raw()); };
  std::unordered_map<int64_t, void *> pointers = {
      {kQuery, operand(0)}, {kKey, operand(1)}, {kValue, operand(2)}};
  const AttentionShape &shape = launch.shape;
  bool gradient = launch.backward != nullptr;
  // Scratch: the workspace, then (attention_grad) the forward's result and
  // statistics, 256-byte aligned.
  auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  int64_t workspace = aligned(std::max<int64_t>(
      launch.forward->workspace, gradient ? launch.backward->workspace : 0));
  int64_t resultBytes = gradient ? aligned(args.in(0).bytes()) : 0;
  int64_t statisticsBytes =
      gradient ? aligned(shape.batch * shape.heads * shape.seq * 4) : 0;
  char *scratch = nullptr;
  if (int64_t bytes = workspace + resultBytes + statisticsBytes; bytes > 0)
    TRELLIS_CUDA_RETURN_IF_ERROR(
        cudaMallocAsync(reinterpret_cast<void **>(&scratch), bytes, stream),
        "allocating cuDNN attention's workspace");
  auto run = [&]() -> Status {
    if (!gradient) {
      pointers[kResult] = args.out(0).raw();
      return execute(*launch.forward, runtime, pointers, scratch);
    }
    pointers[kResult] = scratch + workspace;
    pointers[kStatistics] = scratch + workspace + resultBytes;
    TRELLIS_RETURN_IF_ERROR(
        execute(*launch.forward, runtime, pointers, scratch));
    pointers[kResultGrad] = operand(3);
    pointers[kQueryGrad] = args.out(0).raw();
    pointers[kKeyGrad] = args.out(1).raw();
    pointers[kValueGrad] = args.out(2).raw();
    return execute(*launch.backward, runtime, pointers, scratch);
  };
  Status status = run();
  if (scratch)
    (void)cudaFreeAsync(scratch, stream);
  return status;
}

} // namespace trellis::runtime::cuda
