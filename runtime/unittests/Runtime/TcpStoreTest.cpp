//===- TcpStoreTest.cpp - The authenticated rendezvous store --------------===//
//
// Real sockets on loopback: a client with the job's secret reads and
// writes; one without is refused before it can touch a key; the secret
// never crosses the wire, and a server must prove it too; clients that
// never finish their handshake cannot keep the job's ranks out; requests
// over the caps close the connection without storing anything.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Rendezvous.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>

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

/// The server's challenge, which opens every connection ("" if none).
std::string readChallenge(int fd) {
  std::string challenge(1 + kStoreChallengeBytes, '\0');
  if (::recv(fd, challenge.data(), challenge.size(), MSG_WAITALL) !=
          static_cast<ssize_t>(challenge.size()) ||
      challenge[0] != 'N')
    return "";
  return challenge.substr(1);
}

/// Answers the server's challenge with a proof made from `token`.
void sendHandshake(int fd, const std::string &token) {
  std::string challenge = readChallenge(fd);
  ASSERT_EQ(challenge.size(), kStoreChallengeBytes);
  std::string mine(kStoreChallengeBytes, 'c');
  std::string proof = storeHandshakeProof(token, "client", challenge, mine);
  sendBytes(fd, "H", 1);
  sendBytes(fd, proof.data(), proof.size());
  sendBytes(fd, mine.data(), mine.size());
}

/// A raw connection that proved it knows the job's secret.
int connectAuthenticated(int port) {
  int fd = connectRaw(port);
  sendHandshake(fd, kToken);
  EXPECT_EQ(readReply(fd), 'K');
  std::string answer(kStoreChallengeBytes, '\0');
  EXPECT_EQ(::recv(fd, answer.data(), answer.size(), MSG_WAITALL),
            static_cast<ssize_t>(answer.size()));
  return fd;
}

TEST(TcpStoreTest, AClientWithTheSecretWritesAndReads) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  std::unique_ptr<RendezvousStore> writer =
      connectTcpStore("127.0.0.1", port, kToken, 5000ms);
  std::unique_ptr<RendezvousStore> reader =
      connectTcpStore("localhost", port, kToken, 5000ms);
  ASSERT_TRUE(writer->set("key", {'a', 'b', 'c'}).ok());
  StatusOr<std::vector<char>> value = reader->get("key", 5000ms);
  ASSERT_TRUE(value.ok()) << value.status().message();
  EXPECT_EQ(*value, (std::vector<char>{'a', 'b', 'c'}));
}

TEST(TcpStoreTest, AKeyIsClaimedOnce) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  std::unique_ptr<RendezvousStore> first =
      connectTcpStore("127.0.0.1", port, kToken, 5000ms);
  std::unique_ptr<RendezvousStore> second =
      connectTcpStore("127.0.0.1", port, kToken, 5000ms);
  StatusOr<std::vector<char>> won = first->claim("owner", {'a'});
  ASSERT_TRUE(won.ok()) << won.status().message();
  EXPECT_EQ(*won, std::vector<char>{'a'});
  // The second claimant learns the holder; the value stays the first's.
  StatusOr<std::vector<char>> lost = second->claim("owner", {'b', 'c'});
  ASSERT_TRUE(lost.ok()) << lost.status().message();
  EXPECT_EQ(*lost, std::vector<char>{'a'});
  StatusOr<std::vector<char>> read = second->get("owner", 5000ms);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, std::vector<char>{'a'});
}

TEST(TcpStoreTest, ListensOnIPv6) {
  auto [server, port] = startServer("::1");
  ASSERT_TRUE(server);
  std::unique_ptr<RendezvousStore> client =
      connectTcpStore("::1", port, kToken, 5000ms);
  ASSERT_TRUE(client->set("six", {'6'}).ok());
  StatusOr<std::vector<char>> value = client->get("six", 5000ms);
  ASSERT_TRUE(value.ok()) << value.status().message();
  EXPECT_EQ(*value, std::vector<char>{'6'});
}

TEST(TcpStoreTest, RefusesAWrongSecretNamingTheFix) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  std::unique_ptr<RendezvousStore> stranger =
      connectTcpStore("127.0.0.1", port, "not-the-job-secret", 5000ms);
  Status status = stranger->set("key", {'x'});
  ASSERT_FALSE(status.ok()) << "a client with a wrong secret wrote a key";
  EXPECT_NE(status.message().find("refused this rank's job token"),
            std::string::npos)
      << status.message();
}

TEST(TcpStoreTest, ARequestBeforeTheHandshakeIsRefusedAndStoresNothing) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  int fd = connectRaw(port);
  EXPECT_EQ(readChallenge(fd).size(), kStoreChallengeBytes);
  // In one piece: the server refuses at its first byte and closes.
  uint32_t keyLength = 3;
  uint64_t valueLength = 1;
  std::string request = "S";
  request.append(reinterpret_cast<const char *>(&keyLength), 4);
  request += "key";
  request.append(reinterpret_cast<const char *>(&valueLength), 8);
  request += "x";
  sendBytes(fd, request.data(), request.size());
  EXPECT_EQ(readReply(fd), 'R');
  EXPECT_EQ(readReply(fd), 0) << "the connection stays open";
  ::close(fd);
  // The key was never written: a reader with the secret times out.
  std::unique_ptr<RendezvousStore> client =
      connectTcpStore("127.0.0.1", port, kToken, 300ms);
  EXPECT_FALSE(client->get("key", 300ms).ok());
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
  std::unique_ptr<RendezvousStore> client =
      connectTcpStore("127.0.0.1", port, kToken, 300ms);
  EXPECT_FALSE(client->get("big", 300ms).ok());
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

TEST(TcpStoreTest, ATakenPortIsAnErrorNamingIt) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  StatusOr<std::unique_ptr<TcpStoreServer>> second =
      TcpStoreServer::start("127.0.0.1", port, kToken);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            "store: cannot listen on 127.0.0.1:" + std::to_string(port) +
                ": Address already in use");
}

TEST(TcpStoreTest, TimeoutsNameWhatWasAwaited) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  std::unique_ptr<RendezvousStore> client =
      connectTcpStore("127.0.0.1", port, kToken, 200ms);
  StatusOr<std::vector<char>> value = client->get("never-set", 200ms);
  ASSERT_FALSE(value.ok()) << "read a key nobody wrote";
  EXPECT_EQ(value.status().message(), "store: timed out waiting for never-set");
  // Nobody listens on a port just freed.
  int freed = port;
  server.reset();
  std::unique_ptr<RendezvousStore> stranded =
      connectTcpStore("127.0.0.1", freed, kToken, 200ms);
  Status status = stranded->set("key", {'x'});
  ASSERT_FALSE(status.ok()) << "wrote to a store that is gone";
  EXPECT_EQ(status.message().rfind("store: cannot reach 127.0.0.1:" +
                                       std::to_string(freed) +
                                       " within the timeout: ",
                                   0),
            0u)
      << status.message();
}

/// A listening socket on a free loopback port (written to `port`).
int listenOnLoopback(int &port) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  EXPECT_EQ(
      ::bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof(address)),
      0);
  socklen_t length = sizeof(address);
  ::getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length);
  port = ntohs(address.sin_port);
  ::listen(listener, 4);
  return listener;
}

/// The server's side of the handshake on `fd`: a challenge of `fill`
/// bytes, the client's answer read whole, then 'K' and a proof made from
/// `secret`. Returns what the client sent ("" if it did not send all).
std::string handshakeAsServer(int fd, char fill, const std::string &secret) {
  std::string challenge(kStoreChallengeBytes, fill);
  ::send(fd, "N", 1, MSG_NOSIGNAL);
  ::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL);
  std::string received(1 + 2 * kStoreChallengeBytes, '\0');
  if (::recv(fd, received.data(), received.size(), MSG_WAITALL) !=
      static_cast<ssize_t>(received.size()))
    return "";
  std::string answer = storeHandshakeProof(
      secret, "server", challenge, received.substr(1 + kStoreChallengeBytes));
  ::send(fd, "K", 1, MSG_NOSIGNAL);
  ::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
  return received;
}

/// A server that accepts the handshake, then answers every request with
/// `reply` (0: closes the connection instead), on a thread.
class FakeStore {
public:
  explicit FakeStore(char reply) : reply_(reply) {
    listener_ = listenOnLoopback(port_);
    thread_ = std::thread([this] {
      int fd = ::accept(listener_, nullptr, nullptr);
      if (!handshakeAsServer(fd, 's', kToken).empty()) {
        // The whole request (so that the client is not cut off while it
        // writes), then the scripted reply.
        char request = 0;
        uint32_t keyLength = 0;
        uint64_t length = 0;
        std::string key;
        bool read = ::recv(fd, &request, 1, MSG_WAITALL) == 1 &&
                    ::recv(fd, &keyLength, 4, MSG_WAITALL) == 4;
        key.resize(read ? keyLength : 0);
        read = read &&
               ::recv(fd, key.data(), keyLength, MSG_WAITALL) ==
                   static_cast<ssize_t>(keyLength) &&
               ::recv(fd, &length, 8, MSG_WAITALL) == 8;
        std::string value(read && request == 'S' ? length : 0, '\0');
        if (read && request == 'S')
          read = ::recv(fd, value.data(), length, MSG_WAITALL) ==
                 static_cast<ssize_t>(length);
        if (read && reply_ != 0)
          ::send(fd, &reply_, 1, MSG_NOSIGNAL);
      }
      ::close(fd);
    });
  }
  ~FakeStore() {
    thread_.join();
    ::close(listener_);
  }
  int port() const { return port_; }

private:
  char reply_;
  int listener_ = -1, port_ = 0;
  std::thread thread_;
};

std::string failureOf(const Status &status) {
  return status.ok() ? "(no error)" : status.message();
}

TEST(TcpStoreTest, NamesEveryBrokenReply) {
  {
    FakeStore full('F');
    std::unique_ptr<RendezvousStore> client =
        connectTcpStore("127.0.0.1", full.port(), kToken, 2000ms);
    EXPECT_EQ(failureOf(client->set("key", {'x'})),
              "store: 127.0.0.1:" + std::to_string(full.port()) +
                  " is full: it holds at most 1024 MiB");
  }
  {
    FakeStore garbled('?');
    std::unique_ptr<RendezvousStore> client =
        connectTcpStore("127.0.0.1", garbled.port(), kToken, 2000ms);
    EXPECT_EQ(failureOf(client->set("key", {'x'})),
              "store: unexpected reply writing key");
  }
  {
    FakeStore closing(0);
    std::unique_ptr<RendezvousStore> client =
        connectTcpStore("127.0.0.1", closing.port(), kToken, 2000ms);
    EXPECT_EQ(failureOf(client->set("key", {'x'})),
              "store: lost the connection to 127.0.0.1:" +
                  std::to_string(closing.port()) + " writing key");
  }
  {
    FakeStore closing(0);
    std::unique_ptr<RendezvousStore> client =
        connectTcpStore("127.0.0.1", closing.port(), kToken, 2000ms);
    EXPECT_EQ(failureOf(client->get("key", 2000ms).status()),
              "store: lost the connection to 127.0.0.1:" +
                  std::to_string(closing.port()) + " reading key");
  }
  {
    // A value announced, then the connection lost.
    FakeStore truncated('V');
    std::unique_ptr<RendezvousStore> client =
        connectTcpStore("127.0.0.1", truncated.port(), kToken, 2000ms);
    EXPECT_EQ(failureOf(client->get("key", 2000ms).status()),
              "store: lost the connection reading key");
  }
}

/// A listener that challenges one client, records what it sends, and
/// answers 'K' with a proof made from `secret` (an impostor's guess).
class ImpostorStore {
public:
  explicit ImpostorStore(std::string secret) : secret_(std::move(secret)) {
    listener_ = listenOnLoopback(port_);
    thread_ = std::thread([this] {
      int fd = ::accept(listener_, nullptr, nullptr);
      received_ = handshakeAsServer(fd, 'i', secret_);
      char more;
      ::recv(fd, &more, 1, 0); // until the client closes
      ::close(fd);
    });
  }
  ~ImpostorStore() {
    if (thread_.joinable())
      thread_.join();
    ::close(listener_);
  }
  int port() const { return port_; }
  /// What the client sent, once it closed.
  const std::string &received() {
    thread_.join();
    return received_;
  }

private:
  std::string secret_, received_;
  int listener_ = -1, port_ = 0;
  std::thread thread_;
};

TEST(TcpStoreTest, TheSecretNeverCrossesTheWireAndAServerMustKnowItToo) {
  ImpostorStore impostor("a guess at the job's secret");
  std::unique_ptr<RendezvousStore> client =
      connectTcpStore("127.0.0.1", impostor.port(), kToken, 2000ms);
  EXPECT_EQ(failureOf(client->set("key", {'x'})),
            "store: 127.0.0.1:" + std::to_string(impostor.port()) +
                " accepted this rank without proving it knows the job's "
                "secret: not this job's store (another job's, or an "
                "impostor); nothing was sent to it");
  client.reset();
  const std::string &sent = impostor.received();
  ASSERT_EQ(sent.size(), 1 + 2 * kStoreChallengeBytes);
  EXPECT_EQ(sent[0], 'H');
  EXPECT_EQ(sent.find(kToken), std::string::npos);
  EXPECT_EQ(sent.find(kToken.substr(0, 8)), std::string::npos);
  // The proof is made for this connection's challenges alone.
  EXPECT_EQ(sent.substr(1, kStoreChallengeBytes),
            storeHandshakeProof(kToken, "client",
                                std::string(kStoreChallengeBytes, 'i'),
                                sent.substr(1 + kStoreChallengeBytes)));
  EXPECT_NE(sent.substr(1, kStoreChallengeBytes),
            storeHandshakeProof(kToken, "client",
                                std::string(kStoreChallengeBytes, 'j'),
                                sent.substr(1 + kStoreChallengeBytes)));
}

TEST(TcpStoreTest, ClientsThatNeverProveThemselvesCannotKeepRanksOut) {
  auto [server, port] = startServer();
  ASSERT_TRUE(server);
  // More idle connections than the server lets prove themselves at once
  // (each read one byte of its challenge and stopped).
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    int fd = connectRaw(port);
    char first = 0;
    EXPECT_EQ(::recv(fd, &first, 1, 0), 1);
    idle.push_back(fd);
  }
  // A rank still gets in, at once: the oldest idle connection makes way.
  std::unique_ptr<RendezvousStore> rank =
      connectTcpStore("127.0.0.1", port, kToken, 2000ms);
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(rank->set("key", {'r'}).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
  // The first idle ones were closed for it.
  char ignored[64];
  EXPECT_EQ(::recv(idle.front(), ignored, sizeof(ignored), 0), 32);
  EXPECT_EQ(::recv(idle.front(), ignored, sizeof(ignored), 0), 0);
  for (int fd : idle)
    ::close(fd);
}

} // namespace
} // namespace trellis::runtime
