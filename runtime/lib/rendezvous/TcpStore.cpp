//===- TcpStore.cpp - A key-value store over TCP for rendezvous -----------===//
//
// How ranks on several nodes meet without a shared filesystem: the
// launcher of node 0 serves it (Rendezvous.h).
//
// Protocol: a connection first proves it knows the job's secret without
// sending it, then makes one request at a time:
//   <- 'N' challenge (32 bytes)                   (sent on accepting)
//   'H' proof (32) clientChallenge (32)           -> 'K' serverProof (32)
//                                                 |  'R' (refused)
//   where proof = storeHandshakeProof(secret, "client", challenge,
//   clientChallenge) and serverProof the same with "server".
//   'S' u32 keyLength key u64 valueLength value   -> 'K' | 'F' (full)
//   'C' u32 keyLength key u64 valueLength value   -> 'V' u64 length value
//                                                    (what the key holds
//                                                    after: set if absent)
//                                                 |  'F' (full)
//   'G' u32 keyLength key u64 timeoutMs           -> 'V' u64 length value
//                                                 |  'T' (timed out)
// The server closes a connection that breaks the protocol, exceeds a cap
// (kMaxKeyBytes, kMaxValueBytes, kMaxStoredBytes, kMaxConnections) or does
// not prove itself within kHandshakeTimeoutSeconds in all; at most
// kMaxPendingHandshakes connections prove themselves at once, the oldest
// closed to make way for a new one.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace trellis::runtime {

namespace {

/// `size` bytes; with a `deadline`, all of them by then (a peer sending
/// one byte at a time does not extend it).
bool readAll(
    int fd, void *data, size_t size,
    std::optional<std::chrono::steady_clock::time_point> deadline = {}) {
  char *p = static_cast<char *>(data);
  while (size) {
    if (deadline) {
      int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                         *deadline - std::chrono::steady_clock::now())
                         .count();
      pollfd waiting{fd, POLLIN, 0};
      if (left <= 0 || ::poll(&waiting, 1, static_cast<int>(left)) != 1)
        return false;
    }
    ssize_t n = ::read(fd, p, size);
    if (n <= 0)
      return false;
    p += n;
    size -= n;
  }
  return true;
}

bool writeAll(int fd, const void *data, size_t size) {
  const char *p = static_cast<const char *>(data);
  while (size) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    p += n;
    size -= n;
  }
  return true;
}

/// A value reply: 'V', its length, its bytes.
bool writeValue(int fd, const std::vector<char> &value) {
  uint64_t length = value.size();
  return writeAll(fd, "V", 1) && writeAll(fd, &length, 8) &&
         writeAll(fd, value.data(), length);
}

constexpr uint32_t kMaxTokenBytes = 256;
constexpr uint32_t kMaxKeyBytes = 4096;
/// Gloo's largest value is a rank's address list: about 150 bytes per
/// peer.
constexpr uint64_t kMaxValueBytes = uint64_t(16) << 20;
constexpr uint64_t kMaxStoredBytes = uint64_t(1) << 30;
constexpr int kMaxConnections = 4096;
constexpr size_t kMaxPendingHandshakes = 64;
constexpr int kHandshakeTimeoutSeconds = 10;

/// A length-prefixed string of at most `limit` bytes.
bool readString(int fd, std::string &text, uint32_t limit) {
  uint32_t length;
  if (!readAll(fd, &length, 4) || length > limit)
    return false;
  text.resize(length);
  return readAll(fd, text.data(), length);
}

/// A fresh random challenge, or "" if the system has no randomness to give.
std::string makeChallenge() {
  std::string challenge(kStoreChallengeBytes, '\0');
  return ::getentropy(challenge.data(), challenge.size()) == 0 ? challenge : "";
}

/// Equal proofs, in a time that does not depend on where they differ.
bool sameProof(const std::string &a, const std::string &b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

} // namespace

std::string storeHandshakeProof(const std::string &token,
                                const std::string &label,
                                const std::string &serverChallenge,
                                const std::string &clientChallenge) {
  std::string message =
      "trellis-store-" + label + ":" + serverChallenge + clientChallenge;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
            reinterpret_cast<const unsigned char *>(message.data()),
            message.size(), digest, &length))
    return "";
  return std::string(reinterpret_cast<char *>(digest), length);
}

struct TcpStoreServer::State {
  int listener = -1;
  std::string token;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<char>> values;
  uint64_t storedBytes = 0;
  std::atomic<int> connections{0};
  bool stopping = false;
  std::thread acceptor;
  /// Connections still proving themselves, oldest first.
  std::mutex pendingMutex;
  std::deque<int> pending;

  /// Admits `fd` among the connections proving themselves, closing the
  /// oldest of them for it when they are at their cap.
  void admit(int fd) {
    std::lock_guard<std::mutex> lock(pendingMutex);
    if (pending.size() >= kMaxPendingHandshakes) {
      // Its handler's reads fail at once; it leaves the list itself
      // before closing the descriptor, so this one is still its own.
      ::shutdown(pending.front(), SHUT_RDWR);
      pending.pop_front();
    }
    pending.push_back(fd);
  }

  void admitted(int fd) {
    std::lock_guard<std::mutex> lock(pendingMutex);
    auto found = std::find(pending.begin(), pending.end(), fd);
    if (found != pending.end())
      pending.erase(found);
  }

  /// Whether the peer proved it knows the job's secret, within the
  /// handshake's time in all; answers with the server's own proof.
  bool authenticate(int fd) {
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::seconds(kHandshakeTimeoutSeconds);
    std::string challenge = makeChallenge();
    if (challenge.empty() || !writeAll(fd, "N", 1) ||
        !writeAll(fd, challenge.data(), challenge.size()))
      return false;
    char op = 0;
    std::string proof(kStoreChallengeBytes, '\0'),
        clientChallenge(kStoreChallengeBytes, '\0');
    bool accepted =
        readAll(fd, &op, 1, deadline) && op == 'H' &&
        readAll(fd, proof.data(), proof.size(), deadline) &&
        readAll(fd, clientChallenge.data(), clientChallenge.size(), deadline) &&
        sameProof(proof, storeHandshakeProof(token, "client", challenge,
                                             clientChallenge));
    if (!accepted) {
      (void)writeAll(fd, "R", 1);
      return false;
    }
    std::string answer =
        storeHandshakeProof(token, "server", challenge, clientChallenge);
    return writeAll(fd, "K", 1) && writeAll(fd, answer.data(), answer.size());
  }

  void serve(int fd) {
    char op;
    while (readAll(fd, &op, 1)) {
      std::string key;
      if (!readString(fd, key, kMaxKeyBytes))
        break;
      if (op == 'S' || op == 'C') {
        uint64_t length;
        if (!readAll(fd, &length, 8) || length > kMaxValueBytes)
          break;
        std::vector<char> value(length);
        if (!readAll(fd, value.data(), length))
          break;
        // A set replaces the key's value; a claim keeps one that exists
        // and answers with what the key holds.
        bool full = false;
        std::vector<char> held;
        {
          std::lock_guard<std::mutex> lock(mutex);
          auto existing = values.find(key);
          if (op == 'C' && existing != values.end()) {
            held = existing->second;
          } else {
            uint64_t replaced =
                existing == values.end() ? 0 : existing->second.size();
            full = storedBytes - replaced + length > kMaxStoredBytes;
            if (!full) {
              storedBytes = storedBytes - replaced + length;
              if (op == 'C')
                held = value;
              values[key] = std::move(value);
            }
          }
        }
        changed.notify_all();
        if (full) {
          (void)writeAll(fd, "F", 1);
          break;
        }
        if (!(op == 'S' ? writeAll(fd, "K", 1) : writeValue(fd, held)))
          break;
      } else if (op == 'G') {
        uint64_t timeoutMs;
        if (!readAll(fd, &timeoutMs, 8))
          break;
        std::unique_lock<std::mutex> lock(mutex);
        bool found =
            changed.wait_for(lock, std::chrono::milliseconds(timeoutMs),
                             [&] { return stopping || values.count(key); });
        if (!found || stopping) {
          lock.unlock();
          if (!writeAll(fd, "T", 1))
            break;
          continue;
        }
        std::vector<char> value = values[key];
        lock.unlock();
        if (!writeValue(fd, value))
          break;
      } else {
        break;
      }
    }
  }
};

StatusOr<std::unique_ptr<TcpStoreServer>>
TcpStoreServer::start(const std::string &host, int port,
                      const std::string &token) {
  if (token.empty() || token.size() > kMaxTokenBytes)
    return Status::error("store: expected a job token of 1 to " +
                         std::to_string(kMaxTokenBytes) + " bytes, found " +
                         std::to_string(token.size()));
  auto state = std::make_shared<State>();
  state->token = token;
  // An IPv4 or IPv6 literal or a host name: the first address of it that
  // can be bound.
  addrinfo hints{}, *addresses = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (int error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(),
                                &hints, &addresses);
      error != 0)
    return Status::error("store: cannot resolve --master-addr '" + host +
                         "' (expected an IPv4 address, an IPv6 address or a "
                         "host name): " +
                         ::gai_strerror(error));
  std::string error = "no address";
  for (addrinfo *address = addresses; address; address = address->ai_next) {
    int fd = ::socket(address->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, address->ai_addr, address->ai_addrlen) == 0 &&
        ::listen(fd, 256) == 0) {
      state->listener = fd;
      break;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  if (state->listener < 0)
    return Status::error("store: cannot listen on " + host + ":" +
                         std::to_string(port) + ": " + error);
  state->acceptor = std::thread([state] {
    while (true) {
      int fd = ::accept4(state->listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0)
        return; // the listener was closed
      if (state->connections.fetch_add(1) >= kMaxConnections) {
        state->connections.fetch_sub(1);
        ::close(fd);
        continue;
      }
      state->admit(fd);
      std::thread([state, fd] {
        bool proved = state->authenticate(fd);
        state->admitted(fd);
        if (proved)
          state->serve(fd);
        ::close(fd);
        state->connections.fetch_sub(1);
      }).detach();
    }
  });
  auto server = std::unique_ptr<TcpStoreServer>(new TcpStoreServer());
  server->state_ = std::move(state);
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->changed.notify_all();
  ::shutdown(state_->listener, SHUT_RDWR);
  ::close(state_->listener);
  if (state_->acceptor.joinable())
    state_->acceptor.join();
}

namespace {

/// The client side: one connection, made at the first request.
class TcpStoreClient : public RendezvousStore {
public:
  TcpStoreClient(std::string host, int port, std::string token,
                 std::chrono::milliseconds connectTimeout)
      : host_(std::move(host)), port_(port), token_(std::move(token)),
        connectTimeout_(connectTimeout) {}
  ~TcpStoreClient() override {
    if (socket_ >= 0)
      ::close(socket_);
  }

  Status set(const std::string &key, const std::vector<char> &data) override;
  StatusOr<std::vector<char>> get(const std::string &key,
                                  std::chrono::milliseconds timeout) override;
  StatusOr<std::vector<char>> claim(const std::string &key,
                                    const std::vector<char> &data) override;

private:
  Status connectOnce();
  /// Sends request `op` ('S' or 'C') of `key` and `data`; its reply's first
  /// byte, or an error (a lost connection, a full store) saying what it
  /// was `doing`.
  StatusOr<char> request(char op, const std::string &key,
                         const std::vector<char> &data, const char *doing);
  /// The handshake, answered by `deadline`; fails, saying which, if the
  /// server refuses the token, never answers or closes the connection.
  Status presentToken(std::chrono::steady_clock::time_point deadline);
  std::string address() const { return host_ + ":" + std::to_string(port_); }

  int socket_ = -1;
  std::string host_;
  int port_;
  std::string token_;
  std::chrono::milliseconds connectTimeout_;
};

namespace {

/// Connects `fd` to `address` within `milliseconds` (a blocking connect to
/// an address that drops packets waits for the kernel's retries, minutes);
/// "" on success, else why not.
std::string connectWithin(int fd, const sockaddr *address, socklen_t length,
                          int64_t milliseconds) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int result = ::connect(fd, address, length);
  if (result != 0 && errno != EINPROGRESS)
    return std::strerror(errno);
  if (result != 0) {
    pollfd waiting{fd, POLLOUT, 0};
    int ready = ::poll(&waiting, 1,
                       static_cast<int>(std::max<int64_t>(
                           0, std::min<int64_t>(milliseconds, INT32_MAX))));
    if (ready == 0)
      return "no answer to the connection";
    int error = 0;
    socklen_t size = sizeof(error);
    if (ready < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0)
      return std::strerror(errno);
    if (error != 0)
      return std::strerror(error);
  }
  ::fcntl(fd, F_SETFL, flags);
  return "";
}

} // namespace

Status TcpStoreClient::connectOnce() {
  if (socket_ >= 0)
    return Status::success();
  // The server may start after this rank: retry until the timeout.
  auto deadline = std::chrono::steady_clock::now() + connectTimeout_;
  std::string error;
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{}, *results = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (int failed = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(),
                                   &hints, &results);
        failed != 0) {
      error = "cannot resolve " + host_ + ": " + ::gai_strerror(failed);
    } else {
      for (addrinfo *address = results; address && socket_ < 0;
           address = address->ai_next) {
        int fd = ::socket(address->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                           deadline - std::chrono::steady_clock::now())
                           .count();
        std::string why = fd < 0 ? std::string(std::strerror(errno))
                                 : connectWithin(fd, address->ai_addr,
                                                 address->ai_addrlen, left);
        if (why.empty()) {
          int yes = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
          socket_ = fd;
          break;
        }
        error = why;
        if (fd >= 0)
          ::close(fd);
      }
      ::freeaddrinfo(results);
      if (socket_ >= 0)
        return presentToken(deadline);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::error("store: cannot reach " + address() +
                       " within the timeout: " + error);
}

Status
TcpStoreClient::presentToken(std::chrono::steady_clock::time_point deadline) {
  // The answer comes within what is left of the timeout, or the peer is
  // no store of ours (a port that accepts and never answers).
  int64_t left = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::milliseconds>(
             deadline - std::chrono::steady_clock::now())
             .count());
  timeval limit{static_cast<time_t>(left / 1000),
                static_cast<suseconds_t>(left % 1000 * 1000)};
  ::setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char opening = 0, reply = 0;
  std::string challenge(kStoreChallengeBytes, '\0'),
      answer(kStoreChallengeBytes, '\0');
  std::string clientChallenge = makeChallenge();
  if (clientChallenge.empty()) {
    ::close(socket_);
    socket_ = -1;
    return Status::error("store: cannot make a handshake challenge: " +
                         std::string(std::strerror(errno)));
  }
  errno = 0;
  bool challenged = readAll(socket_, &opening, 1) && opening == 'N' &&
                    readAll(socket_, challenge.data(), challenge.size());
  std::string proof =
      storeHandshakeProof(token_, "client", challenge, clientChallenge);
  bool answered =
      challenged && writeAll(socket_, "H", 1) &&
      writeAll(socket_, proof.data(), proof.size()) &&
      writeAll(socket_, clientChallenge.data(), clientChallenge.size()) &&
      readAll(socket_, &reply, 1) &&
      (reply != 'K' || readAll(socket_, answer.data(), answer.size()));
  int error = errno;
  bool serverProved =
      answered && reply == 'K' &&
      sameProof(answer, storeHandshakeProof(token_, "server", challenge,
                                            clientChallenge));
  if (serverProved) {
    timeval none{0, 0};
    ::setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
    return Status::success();
  }
  ::close(socket_);
  socket_ = -1;
  if (answered && reply == 'K')
    return Status::error(
        "store: " + address() +
        " accepted this rank without proving it knows the job's secret: "
        "not this job's store (another job's, or an impostor); nothing was "
        "sent to it");
  if (answered && reply == 'R')
    return Status::error(
        "store: " + address() +
        " refused this rank's job token (every node must be given node 0's "
        "secret: the same --job-token-file, or TRELLIS_JOB_TOKEN)");
  if (!answered && (error == EAGAIN || error == EWOULDBLOCK))
    return Status::error(
        "store: " + address() +
        " accepted the connection but did not answer the handshake within "
        "the timeout: is it a Trellis store (node 0's launcher, or rank 0 of "
        "an outside launcher)?");
  return Status::error("store: " + address() +
                       " closed the connection during the handshake: a store "
                       "at its connection cap, or not a Trellis store");
}

StatusOr<char> TcpStoreClient::request(char op, const std::string &key,
                                       const std::vector<char> &data,
                                       const char *doing) {
  TRELLIS_RETURN_IF_ERROR(connectOnce());
  uint32_t keyLength = key.size();
  uint64_t length = data.size();
  char reply;
  if (!writeAll(socket_, &op, 1) || !writeAll(socket_, &keyLength, 4) ||
      !writeAll(socket_, key.data(), keyLength) ||
      !writeAll(socket_, &length, 8) ||
      !writeAll(socket_, data.data(), length) || !readAll(socket_, &reply, 1))
    return Status::error("store: lost the connection to " + address() + " " +
                         doing + " " + key);
  if (reply == 'F')
    return Status::error("store: " + address() + " is full: it holds at most " +
                         std::to_string(kMaxStoredBytes >> 20) + " MiB");
  return reply;
}

Status TcpStoreClient::set(const std::string &key,
                           const std::vector<char> &data) {
  StatusOr<char> reply = request('S', key, data, "writing");
  if (!reply.ok())
    return reply.status();
  if (*reply != 'K')
    return Status::error("store: unexpected reply writing " + key);
  return Status::success();
}

StatusOr<std::vector<char>>
TcpStoreClient::claim(const std::string &key, const std::vector<char> &data) {
  StatusOr<char> reply = request('C', key, data, "claiming");
  if (!reply.ok())
    return reply.status();
  uint64_t heldLength = 0;
  if (*reply != 'V' || !readAll(socket_, &heldLength, 8) ||
      heldLength > kMaxValueBytes)
    return Status::error("store: unexpected reply writing " + key);
  std::vector<char> held(heldLength);
  if (!readAll(socket_, held.data(), heldLength))
    return Status::error("store: lost the connection to " + address() +
                         " claiming " + key);
  return held;
}

StatusOr<std::vector<char>>
TcpStoreClient::get(const std::string &key,
                    std::chrono::milliseconds timeout) {
  TRELLIS_RETURN_IF_ERROR(connectOnce());
  uint32_t keyLength = key.size();
  uint64_t timeoutMs = timeout.count();
  char reply;
  if (!writeAll(socket_, "G", 1) || !writeAll(socket_, &keyLength, 4) ||
      !writeAll(socket_, key.data(), keyLength) ||
      !writeAll(socket_, &timeoutMs, 8) || !readAll(socket_, &reply, 1))
    return Status::error("store: lost the connection to " + address() +
                         " reading " + key);
  if (reply == 'T')
    return Status::error("store: timed out waiting for " + key);
  uint64_t length;
  std::vector<char> value;
  if (!readAll(socket_, &length, 8) ||
      (value.resize(length), !readAll(socket_, value.data(), length)))
    return Status::error("store: lost the connection reading " + key);
  return value;
}

} // namespace

std::unique_ptr<RendezvousStore>
connectTcpStore(std::string host, int port, std::string token,
                std::chrono::milliseconds connectTimeout) {
  return std::make_unique<TcpStoreClient>(std::move(host), port,
                                          std::move(token), connectTimeout);
}

} // namespace trellis::runtime
