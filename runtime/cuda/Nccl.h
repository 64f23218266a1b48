//===- Nccl.h - NCCL opened at run time, and the job's unique id -*- C++
//-*-===//
//
// The CUDA backend's communicator runs on NCCL, opened with dlopen like the
// other NVIDIA libraries (CudaLibraries.h). Its ranks meet through the
// job's rendezvous store: rank 0 makes the NCCL unique id and writes it
// there, the others read it, as with Gloo's addresses.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_NCCL_H
#define TRELLIS_RUNTIME_CUDA_NCCL_H

#include "CudaLibraries.h"

#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Rendezvous.h"

#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace trellis::runtime::cuda {

/// NCCL's entry points the backend calls.
class NcclLibrary {
public:
  /// Opens NCCL (CudaLibraries.h says where it looks).
  static StatusOr<std::shared_ptr<const NcclLibrary>> load();

  /// "NCCL 2.28.9 at PATH".
  std::string describe() const;

  /// `what` failed with `result`, in NCCL's words.
  Status failure(const std::string &what, ncclResult_t result) const;

  decltype(&ncclGetVersion) getVersion = nullptr;
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclGetErrorString) getErrorString = nullptr;
  decltype(&ncclCommInitRankConfig) commInitRankConfig = nullptr;
  decltype(&ncclCommSplit) commSplit = nullptr;
  decltype(&ncclCommFinalize) commFinalize = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclCommAbort) commAbort = nullptr;
  decltype(&ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;

private:
  NcclLibrary() = default;
  SharedLibrary library_;
};

/// The job's NCCL unique id under `key` of `store`: made by rank 0 and
/// written there, read by the others (waiting up to `timeout`). Every rank
/// returns the same bytes.
StatusOr<ncclUniqueId> shareUniqueId(const NcclLibrary &nccl,
                                     RendezvousStore &store, int64_t rank,
                                     const std::string &key,
                                     std::chrono::milliseconds timeout);

/// The round in which each of `links` gets its communicator: links are
/// split from the world one round at a time (ncclCommSplit, where each
/// rank names one color), so no rank may be an end of two links of a
/// round. Each link, in order, takes the first round where neither of its
/// ranks is taken yet: every rank computes the same rounds; a pipeline's
/// links (both ways between neighbouring stages, and from the last stage
/// to the first when interleaved) take four.
std::vector<int> linkRounds(const std::vector<TransferLink> &links);

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_NCCL_H
