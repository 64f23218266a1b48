//===- Nccl.cpp - NCCL opened at run time, and the job's unique id --------===//

#include "Nccl.h"

#include <cstring>
#include <set>

namespace trellis::runtime::cuda {

StatusOr<std::shared_ptr<const NcclLibrary>> NcclLibrary::load() {
  StatusOr<SharedLibrary> library = SharedLibrary::open(ncclLibrary());
  if (!library.ok())
    return library.status();
  std::shared_ptr<NcclLibrary> nccl(new NcclLibrary());
  nccl->library_ = std::move(*library);
  const SharedLibrary &from = nccl->library_;
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclGetVersion", nccl->getVersion));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "ncclGetUniqueId", nccl->getUniqueId));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "ncclGetErrorString", nccl->getErrorString));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "ncclCommInitRankConfig", nccl->commInitRankConfig));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclCommSplit", nccl->commSplit));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "ncclCommFinalize", nccl->commFinalize));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "ncclCommDestroy", nccl->commDestroy));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclCommAbort", nccl->commAbort));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "ncclCommGetAsyncError", nccl->commGetAsyncError));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclAllReduce", nccl->allReduce));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclAllGather", nccl->allGather));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclBroadcast", nccl->broadcast));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclSend", nccl->send));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclRecv", nccl->recv));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclGroupStart", nccl->groupStart));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "ncclGroupEnd", nccl->groupEnd));
  return std::shared_ptr<const NcclLibrary>(std::move(nccl));
}

std::string NcclLibrary::describe() const {
  int version = 0;
  getVersion(&version);
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9.
  return "NCCL " + std::to_string(version / 10000) + "." +
         std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100) + " at " + library_.path();
}

Status NcclLibrary::failure(const std::string &what,
                            ncclResult_t result) const {
  return Status::error("nccl: " + what + ": " + getErrorString(result));
}

StatusOr<ncclUniqueId> shareUniqueId(const NcclLibrary &nccl,
                                     RendezvousStore &store, int64_t rank,
                                     const std::string &key,
                                     std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t result = nccl.getUniqueId(&id); result != ncclSuccess)
      return nccl.failure("making the job's unique id", result);
    std::vector<char> bytes(id.internal, id.internal + sizeof(id.internal));
    TRELLIS_RETURN_IF_ERROR(store.set(key, bytes));
    return id;
  }
  StatusOr<std::vector<char>> bytes = store.get(key, timeout);
  if (!bytes.ok())
    return bytes.status().withContext("waiting for rank 0's NCCL id");
  if (bytes->size() != sizeof(id.internal))
    return Status::error("nccl: the unique id under '" + key + "' has " +
                         std::to_string(bytes->size()) + " bytes, expected " +
                         std::to_string(sizeof(id.internal)) +
                         " (ranks of different NCCL versions?)");
  std::memcpy(id.internal, bytes->data(), sizeof(id.internal));
  return id;
}

std::vector<int> linkRounds(const std::vector<TransferLink> &links) {
  std::vector<int> rounds;
  // Per round, the ranks it has taken.
  std::vector<std::set<int64_t>> taken;
  for (const TransferLink &link : links) {
    size_t round = 0;
    while (round < taken.size() &&
           (taken[round].count(link.from) || taken[round].count(link.to)))
      ++round;
    if (round == taken.size())
      taken.emplace_back();
    taken[round].insert(link.from);
    taken[round].insert(link.to);
    rounds.push_back(static_cast<int>(round));
  }
  return rounds;
}

} // namespace trellis::runtime::cuda
