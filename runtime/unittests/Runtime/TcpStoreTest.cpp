//===- TcpStoreTest.cpp - The authenticated rendezvous store --------------===//
//
// Real sockets on loopback: a client with the job's secret reads and
// writes; one without is refused before it can touch a key; requests over
// the caps close the connection without storing anything.
//
//===----------------------------------------------------------------------===//

#include "../../gloo/TcpStore.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <stdexcept>

namespace trellis::runtime {
namespace {

using namespace std::chrono_literals;

const std::string kToken = "0123456789abcdef0123456789abcdef";

/// A free-looking port in the ephemeral range, different per test run.
int pickPort() {
  std::random_device device;
  return 20000 + static_cast<int>(device() % 20000);
}

/// A started server and its port (retrying another port if one is taken).
std::pair<std::unique_ptr<TcpStoreServer>, int>
startServer(const std::string &host = "127.0.0.1") {
  for (int attempt = 0; attempt < 20; ++attempt) {
    int port = pickPort();
    StatusOr<std::unique_ptr<TcpStoreServer>> server =
        TcpStoreServer::start(host, port, kToken);
    if (server.ok())
      return {std::move(*server), port};
  }
  ADD_FAILURE() << "no free port";
  return {nullptr, 0};
}

/// A raw TCP connection to loopback `port`.
int connectRaw(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&address),
                      sizeof(address)),
            0);
  timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  return fd;
}

void sendBytes(int fd, const void *data, size_t size) {
  ASSERT_EQ(::send(fd, data, size, MSG_NOSIGNAL), static_cast<ssize_t>(size));
}

/// The server's one-byte reply, or 0 once it closed the connection.
char readReply(int fd) {
  char reply = 0;
  return ::recv(fd, &reply, 1, 0) == 1 ? reply : 0;
}

void sendHandshake(int fd, const std::string &token) {
  uint32_t length = token.size();
  sendBytes(fd, "H", 1);
  sendBytes(fd, &length, 4);
  sendBytes(fd, token.data(), token.size());
}

/// A raw connection that presented the job's secret.
int connectAuthenticated(int port) {
  int fd = connectRaw(port);
  sendHandshake(fd, kToken);
  EXPECT_EQ(readReply(fd), 'K');
  return fd;
}

TEST(TcpStoreTest, AClientWithTheSecretWritesAndReads) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  TcpStoreClient writer("127.0.0.1", port, kToken, 5000ms);
  TcpStoreClient reader("localhost", port, kToken, 5000ms);
  writer.set("key", {'a', 'b', 'c'});
  EXPECT_EQ(reader.get("key"), (std::vector<char>{'a', 'b', 'c'}));
}

TEST(TcpStoreTest, ListensOnIPv6) {
  auto [server, port] = startServer("::1");
  ASSERT_TRUE(server);
  TcpStoreClient client("::1", port, kToken, 5000ms);
  client.set("six", {'6'});
  EXPECT_EQ(client.get("six"), std::vector<char>{'6'});
}

TEST(TcpStoreTest, RefusesAWrongSecretNamingTheFix) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  TcpStoreClient stranger("127.0.0.1", port, "not-the-job-secret", 5000ms);
  try {
    stranger.set("key", {'x'});
    FAIL() << "a client with a wrong secret wrote a key";
  } catch (const std::runtime_error &error) {
    EXPECT_NE(std::string(error.what()).find("refused this rank's job token"),
              std::string::npos)
        << error.what();
  }
}

TEST(TcpStoreTest, ARequestBeforeTheHandshakeIsRefusedAndStoresNothing) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  int fd = connectRaw(port);
  uint32_t keyLength = 3;
  uint64_t valueLength = 1;
  sendBytes(fd, "S", 1);
  sendBytes(fd, &keyLength, 4);
  sendBytes(fd, "key", 3);
  sendBytes(fd, &valueLength, 8);
  sendBytes(fd, "x", 1);
  EXPECT_EQ(readReply(fd), 'R');
  EXPECT_EQ(readReply(fd), 0) << "the connection stays open";
  ::close(fd);
  // The key was never written: a reader with the secret times out.
  TcpStoreClient client("127.0.0.1", port, kToken, 300ms);
  EXPECT_THROW(client.get("key"), std::runtime_error);
}

TEST(TcpStoreTest, AValueOverTheCapClosesTheConnectionUnread) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  int fd = connectAuthenticated(port);
  // Claims 256 MiB: the server closes instead of allocating it.
  uint32_t keyLength = 3;
  uint64_t valueLength = uint64_t(256) << 20;
  sendBytes(fd, "S", 1);
  sendBytes(fd, &keyLength, 4);
  sendBytes(fd, "big", 3);
  sendBytes(fd, &valueLength, 8);
  EXPECT_EQ(readReply(fd), 0);
  ::close(fd);
  TcpStoreClient client("127.0.0.1", port, kToken, 300ms);
  EXPECT_THROW(client.get("big"), std::runtime_error);
}

TEST(TcpStoreTest, AnOversizedKeyClosesTheConnection) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  int fd = connectAuthenticated(port);
  uint32_t keyLength = 1u << 20;
  sendBytes(fd, "G", 1);
  sendBytes(fd, &keyLength, 4);
  EXPECT_EQ(readReply(fd), 0);
  ::close(fd);
}

TEST(TcpStoreTest, RefusesAnEmptyServerSecret) {
  StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::start("127.0.0.1", pickPort(), "");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().message(),
            "store: expected a job token of 1 to 256 bytes, found 0");
}

} // namespace
} // namespace trellis::runtime
