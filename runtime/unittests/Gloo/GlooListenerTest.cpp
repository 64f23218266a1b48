//===- GlooListenerTest.cpp - A stranger on a rank's Gloo listener --------===//
//
// Rank 0 of a two-rank mesh connects in a forked process with real
// sockets; this process reads rank 0's pair address from the directory
// store, connects to that listener before any rank does, and then stays
// silent, sends bytes that are not Gloo's, or answers in Gloo's own framing
// with a proof it cannot know. Rank 1 is played through the store only: its
// published listener sorts after rank 0's, which makes rank 0 the pair's
// listening side, the side a stranger can take.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Rendezvous.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

using namespace trellis;
using namespace trellis::runtime;

namespace {

/// Gloo's serialized tcp::Address: a sockaddr_storage, a sequence number.
constexpr size_t kAddressBytes = sizeof(sockaddr_storage) + sizeof(ssize_t);

/// Gloo's message preamble (tcp::Op): six size_t fields.
struct Preamble {
  size_t nbytes, opcode, slot, offset, length, roffset;
};
constexpr size_t kSendUnboundBuffer = 1, kNotifyRecvReady = 3;
/// The slot of the members' proofs (GlooConnections.cpp).
constexpr size_t kProofSlot = (size_t(1) << 40) + 1;

std::string freshStore(const std::string &name) {
  std::string dir = ::testing::TempDir() + "gloo-listener-" + name + "-" +
                    std::to_string(getpid());
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Forks `rank`, which connects and writes its Status message (or "ok") to
/// DIR/result; its stderr goes to DIR/stderr.
pid_t startRank(const std::string &dir, int64_t rank = 0,
                int timeoutMs = 3000) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  int err = open((dir + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(err, STDERR_FILENO);
  RendezvousOptions options;
  options.storeDir = dir;
  options.timeout = std::chrono::milliseconds(timeoutMs);
  Mesh mesh = *Mesh::parse("dp=2", nullptr);
  StatusOr<const Backend *> cpu = findBackend("cpu");
  StatusOr<std::unique_ptr<Device>> device = (*cpu)->createDevice({1});
  auto connected = (*cpu)->connect(**device, mesh, rank, {{0}}, {}, options);
  std::ofstream(dir + "/result")
      << (connected.ok() ? std::string("ok") : connected.status().message());
  _exit(0);
}

/// The exit code of `pid` (100 if it did not exit).
int waitFor(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

/// A stranger connected to rank 0's listener for rank 1.
struct Stranger {
  int socket = -1;
  std::string listener, self;
  ~Stranger() {
    if (socket >= 0)
      close(socket);
  }
};

std::string format(const sockaddr_in &address) {
  char host[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(address.sin_port));
}

/// Reads rank 0's listener for rank 1 from the store and connects to it.
void takeListener(RendezvousStore &store, Stranger &stranger) {
  StatusOr<std::vector<char>> published =
      store.get("dp/0/0", std::chrono::milliseconds(10000));
  ASSERT_TRUE(published.ok()) << published.status().message();
  ASSERT_EQ(published->size(), kAddressBytes);
  sockaddr_in listener{};
  std::memcpy(&listener, published->data(), sizeof(listener));
  ASSERT_EQ(listener.sin_family, AF_INET);
  stranger.socket = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(stranger.socket, reinterpret_cast<sockaddr *>(&listener),
                    sizeof(listener)),
            0);
  sockaddr_in self{};
  socklen_t length = sizeof(self);
  getsockname(stranger.socket, reinterpret_cast<sockaddr *>(&self), &length);
  stranger.listener = format(listener);
  stranger.self = format(self);
}

/// Publishes member `rank` of "dp" as the store shows it: a listener at
/// 127.0.0.1:`port` for the other member, its host name and a nonce
/// (unless `withNonce` is false).
void publishMember(RendezvousStore &store, int rank, uint16_t port,
                   bool withNonce = true) {
  std::vector<char> address(kAddressBytes, 0);
  sockaddr_in listener{};
  listener.sin_family = AF_INET;
  listener.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &listener.sin_addr);
  std::memcpy(address.data(), &listener, sizeof(listener));
  std::string host = "fake-host";
  std::string member = std::to_string(rank);
  ASSERT_TRUE(store
                  .set("dp/0/rank_" + member,
                       std::vector<char>(host.begin(), host.end()))
                  .ok());
  ASSERT_TRUE(store.set("dp/0/" + member, address).ok());
  if (withNonce) {
    ASSERT_TRUE(store
                    .set("dp/0/trellis-pair-nonce/" + member,
                         std::vector<char>(32, 'n'))
                    .ok());
  }
}

/// Rank 1 as the store shows it, listening on a port that sorts after any
/// other, so that rank 0 is the pair's listening side.
void publishRankOne(RendezvousStore &store) { publishMember(store, 1, 65535); }

TEST(GlooListenerTest, AStrangerHoldingTheListenerIsNamedWithinTheTimeout) {
  std::string dir = freshStore("silent");
  pid_t rank = startRank(dir);
  std::unique_ptr<RendezvousStore> store = openDirectoryStore(dir);
  Stranger stranger;
  takeListener(*store, stranger);
  publishRankOne(*store);
  EXPECT_EQ(waitFor(rank), 0);
  std::string result = readFile(dir + "/result");
  EXPECT_NE(result.find("gloo: proving to member 1 of group {0,1} along "
                        "\"dp\" (rank 0) and back that both belong to this "
                        "job failed ("),
            std::string::npos)
      << result;
  EXPECT_NE(result.find(": a process other than this job's ranks may hold the "
                        "connection"),
            std::string::npos)
      << result;
  EXPECT_NE(
      result.find("accepted " + stranger.listener + " <- " + stranger.self),
      std::string::npos)
      << result;
}

TEST(GlooListenerTest, BytesThatAreNotGloosNameTheListenerAndThePeer) {
  std::string dir = freshStore("bytes");
  pid_t rank = startRank(dir);
  std::unique_ptr<RendezvousStore> store = openDirectoryStore(dir);
  Stranger stranger;
  takeListener(*store, stranger);
  // Data for an unbound buffer nobody posted: Gloo's network thread throws.
  Preamble junk{sizeof(Preamble) + 8, kSendUnboundBuffer, 12345, 0, 8, 0};
  ASSERT_EQ(write(stranger.socket, &junk, sizeof(junk)),
            static_cast<ssize_t>(sizeof(junk)));
  publishRankOne(*store);
  EXPECT_EQ(waitFor(rank), 1);
  std::string stderrText = readFile(dir + "/stderr");
  EXPECT_NE(stderrText.find("trellis: rank 0: error: gloo: Gloo's network "
                            "thread stopped"),
            std::string::npos)
      << stderrText;
  EXPECT_NE(stderrText.find(stranger.listener + " <- " + stranger.self),
            std::string::npos)
      << stderrText;
  EXPECT_NE(stderrText.find("a process other than this job's ranks reached "
                            "it first"),
            std::string::npos)
      << stderrText;
  EXPECT_EQ(readFile(dir + "/result"), "");
}

TEST(GlooListenerTest, GloosFramingWithoutTheJobsProofIsRefused) {
  std::string dir = freshStore("framed");
  pid_t rank = startRank(dir);
  std::unique_ptr<RendezvousStore> store = openDirectoryStore(dir);
  Stranger stranger;
  takeListener(*store, stranger);
  publishRankOne(*store);
  // Wait until rank 0 asks for the proof, then send 32 bytes as Gloo would.
  Preamble heard{};
  bool asked = false;
  while (!asked && read(stranger.socket, &heard, sizeof(heard)) ==
                       static_cast<ssize_t>(sizeof(heard))) {
    if (heard.opcode != kNotifyRecvReady) {
      // Skip the payload of anything else rank 0 sends (its own proof).
      std::vector<char> payload(heard.nbytes - sizeof(heard));
      if (!payload.empty()) {
        ASSERT_EQ(read(stranger.socket, payload.data(), payload.size()),
                  static_cast<ssize_t>(payload.size()));
      }
      continue;
    }
    asked = heard.slot == kProofSlot;
  }
  ASSERT_TRUE(asked);
  char guess[sizeof(Preamble) + 32] = {};
  Preamble framed{sizeof(guess), kSendUnboundBuffer, kProofSlot, 0, 32, 0};
  std::memcpy(guess, &framed, sizeof(framed));
  ASSERT_EQ(write(stranger.socket, guess, sizeof(guess)),
            static_cast<ssize_t>(sizeof(guess)));
  EXPECT_EQ(waitFor(rank), 0);
  std::string result = readFile(dir + "/result");
  EXPECT_NE(result.find("gloo: member 1 of group {0,1} along \"dp\" (rank 0) "
                        "gave a wrong proof that it belongs to this job ("),
            std::string::npos)
      << result;
  EXPECT_NE(result.find("): a process other than this job's ranks holds the "
                        "connection, or the ranks were given different job "
                        "secrets"),
            std::string::npos)
      << result;
  EXPECT_NE(result.find(stranger.listener + " <- " + stranger.self),
            std::string::npos)
      << result;
}

TEST(GlooListenerTest, AMemberWithoutANonceIsNamed) {
  std::string dir = freshStore("nonce");
  pid_t rank = startRank(dir, 0, 1000);
  std::unique_ptr<RendezvousStore> store = openDirectoryStore(dir);
  Stranger stranger;
  takeListener(*store, stranger);
  publishMember(*store, 1, 65535, /*withNonce=*/false);
  EXPECT_EQ(waitFor(rank), 0);
  std::string result = readFile(dir + "/result");
  EXPECT_NE(result.find("gloo: checking the members of group {0,1} along "
                        "\"dp\" (rank 0) failed: "),
            std::string::npos)
      << result;
}

TEST(GlooListenerTest, AListenerThatRefusesIsExplainedWithItsRealPort) {
  // Gloo compares ports as stored (network order): 4096 is 0x0010 there,
  // below any ephemeral port, so rank 1 is the side that connects.
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in free{};
  free.sin_family = AF_INET;
  free.sin_port = htons(4096);
  inet_pton(AF_INET, "127.0.0.1", &free.sin_addr);
  bool bound =
      bind(probe, reinterpret_cast<sockaddr *>(&free), sizeof(free)) == 0;
  close(probe);
  if (!bound)
    GTEST_SKIP() << "127.0.0.1:4096 is in use";
  // Nothing listens there: what a member's listener does once it has
  // accepted a stranger.
  std::string dir = freshStore("refused");
  std::unique_ptr<RendezvousStore> store = openDirectoryStore(dir);
  publishMember(*store, 0, 4096);
  pid_t rank = startRank(dir, 1);
  EXPECT_EQ(waitFor(rank), 0);
  std::string result = readFile(dir + "/result");
  EXPECT_NE(result.find("gloo: connecting group {0,1} along \"dp\" (rank 1) "
                        "failed: "),
            std::string::npos)
      << result;
  EXPECT_NE(result.find("member 0 listens on 127.0.0.1:4096"),
            std::string::npos)
      << result;
  EXPECT_NE(result.find("either its process exited or another process "
                        "reached that listener first"),
            std::string::npos)
      << result;
}

} // namespace
