//===- GlooConnections.h - Who is at the end of a Gloo pair ----*- C++ -*-===//
//-*-===//
//
// Debian's Gloo listens on one TCP port per pair and takes the first
// connection it accepts as the peer, without a handshake. Anything that
// reaches such a port during setup becomes "the peer": the real member is
// then refused, and bytes that are not Gloo's can stop Gloo's network
// thread with an uncaught exception. This file gives those cases names:
//
//  - AddressRecordingStore remembers each group's listener addresses as
//    Gloo publishes and reads them, so errors name host:port (Gloo's own
//    messages print ports byte-swapped);
//  - proveGroupMembers makes every pair of a freshly connected group prove
//    it belongs to this job (HMAC over a nonce published in the store),
//    before any collective trusts it;
//  - installGlooTerminateHandler turns an exception escaping Gloo's network
//    thread into one message naming the listeners and who is connected to
//    them, and exit code 1.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_GLOO_GLOOCONNECTIONS_H
#define TRELLIS_RUNTIME_GLOO_GLOOCONNECTIONS_H

#include "trellis/Runtime/Status.h"

#include <gloo/context.h>
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace trellis::runtime {

/// The pair addresses of one group as this rank knows them.
struct GroupAddresses {
  /// The group's name, the same on every member ("dp/0").
  std::string name;
  /// The group as this rank describes it in errors.
  std::string group;
  int64_t rank = 0;
  int position = 0;
  int size = 0;
  /// listeners[i]: the host:port this rank listens on for member i ("" for
  /// itself, or before Gloo published it).
  std::vector<std::string> listeners;
  /// memberListeners[i]: the host:port member i listens on for this rank
  /// ("" until this rank read it).
  std::vector<std::string> memberListeners;
};

/// A Gloo store over `inner` that records, in `addresses`, the pair
/// addresses a context publishes and reads while it connects.
class AddressRecordingStore : public gloo::rendezvous::Store {
public:
  AddressRecordingStore(gloo::rendezvous::Store &inner,
                        GroupAddresses &addresses)
      : inner_(inner), addresses_(addresses) {}

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;

private:
  void record(const std::string &key, const std::vector<char> &data);

  gloo::rendezvous::Store &inner_;
  GroupAddresses &addresses_;
};

/// Registers `addresses` for the terminate handler's report (kept for the
/// life of the process; the latest registration of a group wins).
void rememberGroupAddresses(const GroupAddresses &addresses);

/// Publishes this rank's nonce for the group in `store` (before the group
/// connects, so that members need not wait for it).
void publishPairNonce(gloo::rendezvous::Store &store, int position);

/// Over every pair of `context` (connected through `store`, where each
/// member published its nonce): sends this rank's proof, HMAC-SHA256 keyed
/// by `jobToken` over the group, both positions and the receiver's nonce,
/// and checks each member's. A member that sends a wrong proof or none
/// within `timeout` is an error naming it, this rank's listener for it and
/// who is connected there.
Status proveGroupMembers(gloo::Context &context, gloo::rendezvous::Store &store,
                         const GroupAddresses &addresses,
                         const std::string &jobToken,
                         std::chrono::milliseconds timeout);

/// What a failed connect adds to Gloo's message: every member's listener
/// for this rank, and for a refused connection what refuses one.
std::string explainConnectFailure(const GroupAddresses &addresses,
                                  const std::string &glooMessage);

/// The TCP connections, open or closing, whose local end is `hostPort`, as
/// "local <- remote" (from /proc/net/tcp and tcp6; empty where there is
/// none or /proc cannot be read).
std::vector<std::string> connectionsOn(const std::string &hostPort);

/// Makes an exception that escapes a Gloo thread print what
/// rememberGroupAddresses recorded (each listener and the connections on
/// it) and exit with code 1; other uncaught exceptions keep the previous
/// handler. Idempotent.
void installGlooTerminateHandler();

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_GLOO_GLOOCONNECTIONS_H
