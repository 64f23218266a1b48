//===- TcpStore.cpp - A key-value store over TCP for rendezvous -----------===//
//
// Protocol, one request at a time per connection:
//   'S' u32 keyLength key u64 valueLength value   -> 'K'
//   'G' u32 keyLength key u64 timeoutMs           -> 'V' u64 length value
//                                                 |  'T' (timed out)
//
//===----------------------------------------------------------------------===//

#include "TcpStore.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace trellis::runtime {

namespace {

bool readAll(int fd, void *data, size_t size) {
  char *p = static_cast<char *>(data);
  while (size) {
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

bool readKey(int fd, std::string &key) {
  uint32_t length;
  if (!readAll(fd, &length, 4) || length > (1u << 20))
    return false;
  key.resize(length);
  return readAll(fd, key.data(), length);
}

} // namespace

struct TcpStoreServer::State {
  int listener = -1;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<char>> values;
  bool stopping = false;
  std::thread acceptor;

  void serve(int fd) {
    char op;
    while (readAll(fd, &op, 1)) {
      std::string key;
      if (!readKey(fd, key))
        break;
      if (op == 'S') {
        uint64_t length;
        if (!readAll(fd, &length, 8) || length > (uint64_t(1) << 30))
          break;
        std::vector<char> value(length);
        if (!readAll(fd, value.data(), length))
          break;
        {
          std::lock_guard<std::mutex> lock(mutex);
          values[key] = std::move(value);
        }
        changed.notify_all();
        if (!writeAll(fd, "K", 1))
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
        uint64_t length = value.size();
        if (!writeAll(fd, "V", 1) || !writeAll(fd, &length, 8) ||
            !writeAll(fd, value.data(), length))
          break;
      } else {
        break;
      }
    }
    ::close(fd);
  }
};

StatusOr<std::unique_ptr<TcpStoreServer>>
TcpStoreServer::start(const std::string &host, int port) {
  auto state = std::make_shared<State>();
  state->listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (state->listener < 0)
    return Status::error(std::string("store: socket: ") + std::strerror(errno));
  int yes = 1;
  ::setsockopt(state->listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1)
    return Status::error("store: expected an IPv4 address for --master-addr, "
                         "found '" +
                         host + "'");
  if (::bind(state->listener, reinterpret_cast<sockaddr *>(&address),
             sizeof(address)) != 0 ||
      ::listen(state->listener, 256) != 0) {
    std::string error = std::strerror(errno);
    ::close(state->listener);
    return Status::error("store: cannot listen on " + host + ":" +
                         std::to_string(port) + ": " + error);
  }
  state->acceptor = std::thread([state] {
    while (true) {
      int fd = ::accept4(state->listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0)
        return; // the listener was closed
      std::thread([state, fd] { state->serve(fd); }).detach();
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

TcpStoreClient::TcpStoreClient(std::string host, int port,
                               std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

TcpStoreClient::~TcpStoreClient() {
  if (socket_ >= 0)
    ::close(socket_);
}

void TcpStoreClient::connectOnce() {
  if (socket_ >= 0)
    return;
  // The server may start after this rank: retry until the timeout.
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::string error;
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{}, *result = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints,
                      &result) == 0) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && ::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
        ::freeaddrinfo(result);
        int yes = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
        socket_ = fd;
        return;
      }
      error = std::strerror(errno);
      if (fd >= 0)
        ::close(fd);
      ::freeaddrinfo(result);
    } else {
      error = "cannot resolve " + host_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("store: cannot reach " + host_ + ":" +
                           std::to_string(port_) +
                           " within the timeout: " + error);
}

void TcpStoreClient::set(const std::string &key,
                         const std::vector<char> &data) {
  connectOnce();
  uint32_t keyLength = key.size();
  uint64_t length = data.size();
  char reply;
  if (!writeAll(socket_, "S", 1) || !writeAll(socket_, &keyLength, 4) ||
      !writeAll(socket_, key.data(), keyLength) ||
      !writeAll(socket_, &length, 8) ||
      !writeAll(socket_, data.data(), length) || !readAll(socket_, &reply, 1) ||
      reply != 'K')
    throw std::runtime_error("store: lost the connection to " + host_ + ":" +
                             std::to_string(port_) + " writing " + key);
}

std::vector<char> TcpStoreClient::get(const std::string &key) {
  connectOnce();
  uint32_t keyLength = key.size();
  uint64_t timeoutMs = timeout_.count();
  char reply;
  if (!writeAll(socket_, "G", 1) || !writeAll(socket_, &keyLength, 4) ||
      !writeAll(socket_, key.data(), keyLength) ||
      !writeAll(socket_, &timeoutMs, 8) || !readAll(socket_, &reply, 1))
    throw std::runtime_error("store: lost the connection to " + host_ + ":" +
                             std::to_string(port_) + " reading " + key);
  if (reply == 'T')
    throw std::runtime_error("store: timed out waiting for " + key);
  uint64_t length;
  std::vector<char> value;
  if (!readAll(socket_, &length, 8) ||
      (value.resize(length), !readAll(socket_, value.data(), length)))
    throw std::runtime_error("store: lost the connection reading " + key);
  return value;
}

void TcpStoreClient::wait(const std::vector<std::string> &keys) {
  wait(keys, timeout_);
}

void TcpStoreClient::wait(const std::vector<std::string> &keys,
                          const std::chrono::milliseconds &) {
  for (const std::string &key : keys)
    (void)get(key);
}

} // namespace trellis::runtime
