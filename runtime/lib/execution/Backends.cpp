//===- Backends.cpp - The backends this runtime was built with ------------===//
//
// The one list of backends: a new backend adds its line here. Also the
// Device interface's default methods and what kernels of every backend ask
// of their arguments.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"

#include "../cpu/CpuBackend.h"
#ifdef TRELLIS_HAVE_CUDA
#include "../cuda/CudaBackend.h"
#endif

#include <cstdio>
#include <cstdlib>

namespace trellis::runtime {

StatusOr<int64_t> shardPosition(const KernelArgs &args) {
  if (args.axes.empty())
    return int64_t(0);
  if (!args.comm)
    return Status::error(args.instruction.op +
                         " is split over mesh axes: run the plan with --nproc "
                         "equal to its mesh size");
  return args.comm->groupPosition(args.axes);
}

int64_t shardCount(const KernelArgs &args) {
  return args.axes.empty() || !args.comm ? 1 : args.comm->groupSize(args.axes);
}

StatusOr<int64_t> ringSourcePosition(const KernelArgs &args) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  int64_t ranks = shardCount(args);
  int64_t shift = parametersOf<AttentionParameters>(args).shift;
  return ((*position - shift) % ranks + ranks) % ranks;
}

ExpertRouting expertRouting(const KernelArgs &args) {
  ExpertRouting routing = parametersOf<ExpertParameters>(args).routing;
  routing.experts = args.in(0).shape().back();
  return routing;
}

void abortOnParameters(const Instruction &instruction, const char *wanted) {
  std::fprintf(stderr,
               "trellis: internal error: a kernel read the parameters of '%s' "
               "as %s, but they are %s\n",
               instruction.op.c_str(), wanted,
               instruction.parameters ? "another family's"
                                      : "not decoded (unresolved)");
  std::abort();
}

StatusOr<int64_t>
Device::firstNonFinite(const std::vector<const Tensor *> &tensors) {
  std::vector<char> host;
  for (size_t t = 0; t < tensors.size(); ++t) {
    host.resize(tensors[t]->bytes());
    TRELLIS_RETURN_IF_ERROR(copyToHost(*tensors[t], host.data()));
    if (!allFiniteValues(tensors[t]->desc().dtype, host.data(),
                         tensors[t]->size()))
      return static_cast<int64_t>(t);
  }
  return int64_t(-1);
}

const std::vector<const Backend *> &registeredBackends() {
  static const std::vector<const Backend *> backends = {
      &cpu::backend(),
#ifdef TRELLIS_HAVE_CUDA
      &cuda::backend(),
#endif
  };
  return backends;
}

StatusOr<const Backend *> findBackend(const std::string &name) {
  std::string names;
  for (const Backend *backend : registeredBackends()) {
    if (backend->name() == name)
      return backend;
    names += (names.empty() ? "" : ", ") + backend->name();
  }
  return Status::error("unknown device '" + name + "': this runtime has " +
                       names);
}

} // namespace trellis::runtime
