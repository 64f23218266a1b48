//===- GlooConnections.cpp - Who is on the other end of a Gloo pair -------===//

#include "GlooConnections.h"

#include "trellis/Runtime/Rendezvous.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

namespace trellis::runtime {

namespace {

/// Gloo's serialized tcp::Address: a sockaddr_storage and a sequence number.
constexpr size_t kAddressBytes =
    sizeof(sockaddr_storage) + sizeof(gloo::transport::tcp::sequence_number_t);

/// "127.0.0.1:41000" or "[::1]:41000"; "" for anything else.
std::string formatSocketAddress(const sockaddr_storage &address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto &in = reinterpret_cast<const sockaddr_in &>(address);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in.sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto &in6 = reinterpret_cast<const sockaddr_in6 &>(address);
    inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    return "[" + std::string(host) +
           "]:" + std::to_string(ntohs(in6.sin6_port));
  }
  return "";
}

/// The i-th serialized address in `data`, formatted ("" if out of range).
std::string addressAt(const std::vector<char> &data, size_t index) {
  if ((index + 1) * kAddressBytes > data.size())
    return "";
  sockaddr_storage address{};
  std::memcpy(&address, data.data() + index * kAddressBytes, sizeof(address));
  return formatSocketAddress(address);
}

/// A position key ("3") as its number, or -1.
int positionKey(const std::string &key) {
  if (key.empty() || key.size() > 9 ||
      key.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoi(key);
}

std::mutex &registryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<GroupAddresses> &registry() {
  static std::vector<GroupAddresses> groups;
  return groups;
}

std::string nonceKey(int position) {
  return "trellis-pair-nonce/" + std::to_string(position);
}

/// The proof member `from` sends member `to` of `group`.
std::string pairProof(const std::string &jobToken, const std::string &group,
                      int from, int to, const std::vector<char> &nonce) {
  return storeHandshakeProof(jobToken,
                             "gloo-pair " + group + " " + std::to_string(from) +
                                 "->" + std::to_string(to),
                             std::string(nonce.begin(), nonce.end()), "");
}

/// "member 1 of group {0,1} along "dp" (rank 0)".
std::string memberName(const GroupAddresses &addresses, int member) {
  return "member " + std::to_string(member) + " of " + addresses.group;
}

/// The pair of this rank and `member` on the wire, for an error: the
/// listening side accepted on its own listener, the other side connected
/// to the member's ("" if neither address is known).
std::string pairConnection(const GroupAddresses &addresses, int member) {
  auto at = [member](const std::vector<std::string> &list) {
    return member < static_cast<int>(list.size()) ? list[member]
                                                  : std::string();
  };
  std::string listener = at(addresses.listeners);
  std::vector<std::string> connections =
      listener.empty() ? std::vector<std::string>() : connectionsOn(listener);
  if (!connections.empty()) {
    std::string text = "this rank's listener for it accepted ";
    for (size_t i = 0; i < connections.size(); ++i)
      text += (i ? ", " : "") + connections[i];
    return text;
  }
  std::string memberListener = at(addresses.memberListeners);
  if (!memberListener.empty())
    return "this rank connected to its listener " + memberListener;
  return listener.empty() ? "" : "this rank listened for it on " + listener;
}

/// One /proc/net/tcp address ("0100007F:A028") as host:port.
std::string procAddress(const std::string &field, bool six) {
  size_t colon = field.find(':');
  if (colon == std::string::npos)
    return "";
  std::string hex = field.substr(0, colon);
  sockaddr_storage address{};
  uint16_t port = static_cast<uint16_t>(
      std::strtoul(field.c_str() + colon + 1, nullptr, 16));
  if (!six && hex.size() == 8) {
    auto &in = reinterpret_cast<sockaddr_in &>(address);
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    // The kernel prints the address as a host-order word of its bytes.
    uint32_t word =
        static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
    std::memcpy(&in.sin_addr, &word, sizeof(word));
  } else if (six && hex.size() == 32) {
    auto &in6 = reinterpret_cast<sockaddr_in6 &>(address);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(port);
    for (int part = 0; part < 4; ++part) {
      uint32_t word = static_cast<uint32_t>(
          std::strtoul(hex.substr(part * 8, 8).c_str(), nullptr, 16));
      std::memcpy(reinterpret_cast<char *>(&in6.sin6_addr) + part * 4, &word,
                  sizeof(word));
    }
  } else {
    return "";
  }
  return formatSocketAddress(address);
}

/// The terminate handler in place before ours.
std::terminate_handler previousTerminateHandler = nullptr;

[[noreturn]] void onUncaughtException() {
  std::string what;
  bool fromGloo = false;
  if (std::exception_ptr error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const gloo::EnforceNotMet &glooError) {
      fromGloo = true;
      what = glooError.what();
    } catch (const gloo::Exception &glooError) {
      fromGloo = true;
      what = glooError.what();
    } catch (...) {
    }
  }
  if (!fromGloo) {
    if (previousTerminateHandler)
      previousTerminateHandler();
    std::abort();
  }
  std::string report = "gloo: Gloo's network thread stopped (" + what + ")";
  // The thread that connects may hold the registry; then say less.
  std::unique_lock<std::mutex> lock(registryMutex(), std::try_to_lock);
  int64_t rank = -1;
  if (lock.owns_lock()) {
    for (const GroupAddresses &group : registry()) {
      rank = group.rank;
      for (int member = 0; member < group.size; ++member)
        if (member != group.position &&
            member < static_cast<int>(group.listeners.size()) &&
            !group.listeners[member].empty())
          report += "\n  " + memberName(group, member) + ": " +
                    pairConnection(group, member);
    }
  }
  report += "\nA connection to one of this rank's Gloo listeners carried bytes "
            "Gloo cannot take: a process other than this job's ranks reached "
            "it first. Gloo listens on the --host address of each rank; keep "
            "it out of reach of untrusted hosts.\n";
  std::string prefix =
      rank >= 0 ? "trellis: rank " + std::to_string(rank) + ": error: "
                : "trellis: error: ";
  std::string message = prefix + report;
  (void)!::write(STDERR_FILENO, message.data(), message.size());
  std::_Exit(1);
}

} // namespace

void AddressRecordingStore::record(const std::string &key,
                                   const std::vector<char> &data) {
  int member = positionKey(key);
  if (member < 0 || member >= addresses_.size || addresses_.size < 2)
    return;
  // Gloo publishes, under a member's position, its listeners for every
  // other member in order (extractAddress in gloo/rendezvous/context.cc).
  if (member == addresses_.position) {
    for (int other = 0; other < addresses_.size; ++other)
      if (other != member)
        addresses_.listeners[other] =
            addressAt(data, other < member ? other : other - 1);
  } else {
    int self = addresses_.position;
    addresses_.memberListeners[member] =
        addressAt(data, self < member ? self : self - 1);
  }
  rememberGroupAddresses(addresses_);
}

void AddressRecordingStore::set(const std::string &key,
                                const std::vector<char> &data) {
  inner_.set(key, data);
  record(key, data);
}

std::vector<char> AddressRecordingStore::get(const std::string &key) {
  std::vector<char> data = inner_.get(key);
  record(key, data);
  return data;
}

void AddressRecordingStore::wait(const std::vector<std::string> &keys) {
  inner_.wait(keys);
}

void AddressRecordingStore::wait(const std::vector<std::string> &keys,
                                 const std::chrono::milliseconds &timeout) {
  inner_.wait(keys, timeout);
}

void rememberGroupAddresses(const GroupAddresses &addresses) {
  std::lock_guard<std::mutex> lock(registryMutex());
  for (GroupAddresses &known : registry())
    if (known.name == addresses.name && known.rank == addresses.rank) {
      known = addresses;
      return;
    }
  registry().push_back(addresses);
}

void publishPairNonce(gloo::rendezvous::Store &store, int position) {
  std::random_device entropy;
  std::vector<char> nonce(kStoreChallengeBytes);
  for (size_t i = 0; i < nonce.size(); i += sizeof(uint32_t)) {
    uint32_t word = entropy();
    std::memcpy(nonce.data() + i, &word,
                std::min(sizeof(word), nonce.size() - i));
  }
  store.set(nonceKey(position), nonce);
}

Status proveGroupMembers(gloo::Context &context, gloo::rendezvous::Store &store,
                         const GroupAddresses &addresses,
                         const std::string &jobToken,
                         std::chrono::milliseconds timeout) {
  // A slot apart from channels and permutes (GlooCommunicator.cpp).
  constexpr uint64_t kProofSlot = (uint64_t(1) << 40) + 1;
  int self = addresses.position;
  std::vector<char> ownNonce;
  std::vector<std::string> outgoing(addresses.size), incoming(addresses.size);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends, receives;
  try {
    ownNonce = store.get(nonceKey(self));
    for (int member = 0; member < addresses.size; ++member) {
      if (member == self)
        continue;
      outgoing[member] = pairProof(jobToken, addresses.name, self, member,
                                   store.get(nonceKey(member)));
      incoming[member].assign(outgoing[member].size(), '\0');
      receives.push_back(context.createUnboundBuffer(incoming[member].data(),
                                                     incoming[member].size()));
      receives.back()->recv(member, kProofSlot);
      sends.push_back(context.createUnboundBuffer(outgoing[member].data(),
                                                  outgoing[member].size()));
      sends.back()->send(member, kProofSlot);
    }
  } catch (const std::exception &error) {
    return Status::error(std::string("gloo: checking the members of ") +
                         addresses.group + " failed: " + error.what());
  }
  size_t next = 0;
  for (int member = 0; member < addresses.size; ++member) {
    if (member == self)
      continue;
    gloo::transport::UnboundBuffer &receive = *receives[next];
    gloo::transport::UnboundBuffer &send = *sends[next];
    ++next;
    auto unproven = [&](const std::exception &error) {
      return Status::error(
          "gloo: proving to " + memberName(addresses, member) +
          " and back that both belong to this job failed (" + error.what() +
          "); " + pairConnection(addresses, member) +
          ": a process other than this job's ranks may hold the connection");
    };
    try {
      receive.waitRecv(timeout);
    } catch (const std::exception &error) {
      return unproven(error);
    }
    std::string expected =
        pairProof(jobToken, addresses.name, member, self, ownNonce);
    if (expected.empty() || incoming[member].size() != expected.size() ||
        CRYPTO_memcmp(incoming[member].data(), expected.data(),
                      expected.size()) != 0)
      return Status::error(
          "gloo: " + memberName(addresses, member) +
          " gave a wrong proof that it belongs to this job (" +
          pairConnection(addresses, member) +
          "): a process other than this job's ranks holds the connection, or "
          "the ranks were given different job secrets");
    try {
      send.waitSend(timeout);
    } catch (const std::exception &error) {
      return unproven(error);
    }
  }
  return Status::success();
}

std::string explainConnectFailure(const GroupAddresses &addresses,
                                  const std::string &glooMessage) {
  std::string text;
  for (int member = 0; member < addresses.size; ++member) {
    if (member == addresses.position ||
        member >= static_cast<int>(addresses.memberListeners.size()) ||
        addresses.memberListeners[member].empty())
      continue;
    text += (text.empty() ? "" : ", ") + std::string("member ") +
            std::to_string(member) + " listens on " +
            addresses.memberListeners[member];
  }
  if (!text.empty())
    text = " (" + text + "; Gloo's message prints ports byte-swapped)";
  if (glooMessage.find("Connection refused") != std::string::npos)
    text += ": a member's listener refuses a connection once it has accepted "
            "one, so either its process exited or another process reached "
            "that listener first";
  return text;
}

std::vector<std::string> connectionsOn(const std::string &hostPort) {
  std::vector<std::string> found;
  for (bool six : {false, true}) {
    std::ifstream table(six ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(table, line); // The header.
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state))
        continue;
      // Any state but LISTEN (0A): Gloo closes a pair that timed out, so
      // the connection may be closing by the time it is described.
      if (state == "0A" || procAddress(local, six) != hostPort)
        continue;
      std::string connection = hostPort + " <- " + procAddress(remote, six);
      if (std::find(found.begin(), found.end(), connection) == found.end())
        found.push_back(connection);
    }
  }
  return found;
}

void installGlooTerminateHandler() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    previousTerminateHandler = std::set_terminate(&onUncaughtException);
  });
}

} // namespace trellis::runtime
