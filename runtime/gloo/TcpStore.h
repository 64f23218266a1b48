//===- TcpStore.h - A key-value store over TCP for rendezvous ---*- C++ -*-===//
//
// How ranks on several nodes meet without a shared filesystem (torchrun's
// MASTER_ADDR / MASTER_PORT): the launcher of node 0 serves a key-value
// store; every rank's Gloo rendezvous reads and writes it. Keys are written
// once; a read waits until its key exists or the timeout passes. Every
// connection presents the job's secret first (TRELLIS_JOB_TOKEN); keys,
// values, the bytes held and the connections are capped.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_GLOO_TCPSTORE_H
#define TRELLIS_RUNTIME_GLOO_TCPSTORE_H

#include "trellis/Runtime/Status.h"

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>

namespace trellis::runtime {

/// The server side: accepts clients on a background thread until destroyed.
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

/// The client side, as a Gloo store. Connection failures and timeouts throw
/// (Gloo's stores report errors by exceptions; GlooCommunicator turns them
/// into a Status).
class TcpStoreClient : public gloo::rendezvous::Store {
public:
  /// A client of the store at `host`:`port` that presents `token`.
  TcpStoreClient(std::string host, int port, std::string token,
                 std::chrono::milliseconds timeout);
  ~TcpStoreClient() override;

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;

private:
  void connectOnce();
  /// The handshake; throws if the server refuses the token.
  void presentToken();
  int socket_ = -1;
  std::string host_;
  int port_;
  std::string token_;
  std::chrono::milliseconds timeout_;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_GLOO_TCPSTORE_H
