//===- Rendezvous.h - How ranks meet, whatever their transport -*- C++ -*-===//
//
// Before any communicator exists, ranks meet through a key-value store (as
// torch's c10d stores): a directory every rank can write, or the TCP store
// the launcher of node 0 serves (torchrun's MASTER_ADDR / MASTER_PORT),
// whose every connection presents the job's secret first. Keys are written
// once; a read waits until its key exists or its timeout passes. Every
// communicator bootstraps through it (Gloo's contexts, NCCL's unique id),
// after the ranks agreed they run the same job (agreeOnJob).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_RENDEZVOUS_H
#define TRELLIS_RUNTIME_RENDEZVOUS_H

#include "trellis/Runtime/Communicator.h"
#include "trellis/Runtime/Status.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace trellis::runtime {

/// A store ranks meet through. Failures are Statuses naming the store and
/// the key.
class RendezvousStore {
public:
  virtual ~RendezvousStore() = default;
  /// Writes `value` under `key`.
  virtual Status set(const std::string &key,
                     const std::vector<char> &value) = 0;
  /// The value of `key`, waiting until it is written or `timeout` passes.
  virtual StatusOr<std::vector<char>>
  get(const std::string &key, std::chrono::milliseconds timeout) = 0;
  /// Writes `value` under `key` unless the key exists, atomically: the
  /// value `key` holds afterwards (`value` when this call wrote it,
  /// another writer's otherwise).
  virtual StatusOr<std::vector<char>> claim(const std::string &key,
                                            const std::vector<char> &value) = 0;
};

/// A store in directory `dir` (every rank of the job writes the same one):
/// a key is a file, written whole under a temporary name and renamed.
std::unique_ptr<RendezvousStore> openDirectoryStore(const std::string &dir);

/// The client of the TCP store at `host`:`port`, proving it knows `token`
/// (never sending it) and checking that the server knows it too. It
/// connects at its first request, retrying (the server may start after
/// this rank) until `connectTimeout` passes.
std::unique_ptr<RendezvousStore>
connectTcpStore(std::string host, int port, std::string token,
                std::chrono::milliseconds connectTimeout);

/// The store `options` name: the TCP store when storePort > 0, else the
/// directory store in storeDir.
std::unique_ptr<RendezvousStore>
openRendezvousStore(const RendezvousOptions &options);

/// The TCP store's handshake (TcpStore.cpp): the server sends a random
/// challenge; the client answers with its proof and its own challenge; the
/// server, if the proof holds, answers with its own. A proof is
/// HMAC-SHA256 keyed by the job's secret over `label` ("client" or
/// "server") and both challenges, so neither side sends the secret, and a
/// proof answers one connection only.
constexpr size_t kStoreChallengeBytes = 32;
std::string storeHandshakeProof(const std::string &token,
                                const std::string &label,
                                const std::string &serverChallenge,
                                const std::string &clientChallenge);

/// The server side of the TCP store: accepts clients on a background
/// thread until destroyed. Keys, values, the bytes held and the
/// connections are capped; a client has kHandshakeTimeout in all to prove
/// itself, and connections still proving themselves are capped apart (the
/// oldest making way for a new one), so that clients that never finish
/// cannot take the places of the job's ranks.
class TcpStoreServer {
public:
  ~TcpStoreServer();
  /// Listens on `host`:`port` (an IPv4 or IPv6 address or a host name),
  /// serving only connections that present `token` (the job's secret).
  static StatusOr<std::unique_ptr<TcpStoreServer>>
  start(const std::string &host, int port, const std::string &token);

private:
  TcpStoreServer() = default;
  struct State;
  std::shared_ptr<State> state_;
};

/// At rendezvous, before any communicator: every rank publishes the fields
/// that must agree across the job (the plan's checksum, seed, data, steps,
/// checkpoint and fault options); rank 0 compares them and publishes one
/// verdict, so a rank started with another plan or option fails every
/// rank with a message naming it and the field, instead of joining and
/// diverging. An error names the first rank and field that differ from
/// rank 0's, with both values, or the rank that did not arrive within
/// `timeout`.
Status agreeOnJob(RendezvousStore &store, int64_t rank, int64_t worldSize,
                  const JobFields &fields, std::chrono::milliseconds timeout);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_RENDEZVOUS_H
