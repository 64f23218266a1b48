//===- NcclBootstrapTest.cpp - NCCL's unique id through the stores --------===//
//
// What a CPU can check of the NCCL bootstrap: NCCL makes its unique id
// without a GPU, and the id rank 0 writes reaches every rank unchanged
// through both rendezvous stores (a shared directory, and the TCP store
// with the job's secret). Threads stand for ranks.
//
//===----------------------------------------------------------------------===//

#include "../../cuda/Nccl.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>

using namespace trellis::runtime;
using namespace trellis::runtime::cuda;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "fedcba9876543210fedcba9876543210";

/// NCCL, or the reason the test skips.
std::shared_ptr<const NcclLibrary> ncclOrSkip(std::string &reason) {
  StatusOr<std::shared_ptr<const NcclLibrary>> nccl = NcclLibrary::load();
  if (!nccl.ok()) {
    reason = nccl.status().message();
    return nullptr;
  }
  return *nccl;
}

/// Runs `ranks` ranks, each opening its store with `open`; returns each
/// rank's id bytes.
std::vector<std::string>
shareAmong(const NcclLibrary &nccl, int ranks,
           const std::function<std::unique_ptr<RendezvousStore>()> &open) {
  std::vector<std::string> ids(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      std::unique_ptr<RendezvousStore> store = open();
      StatusOr<ncclUniqueId> id =
          shareUniqueId(nccl, *store, rank, "trellis.nccl.world", 10s);
      if (id.ok())
        ids[rank].assign(id->internal, sizeof(id->internal));
      else
        ids[rank] = "error: " + id.status().message();
    });
  for (std::thread &thread : threads)
    thread.join();
  return ids;
}

TEST(NcclBootstrapTest, TheUniqueIdReachesEveryRankThroughADirectory) {
  std::string reason;
  std::shared_ptr<const NcclLibrary> nccl = ncclOrSkip(reason);
  if (!nccl)
    GTEST_SKIP() << "no NCCL here: " << reason;
  std::string dir =
      ::testing::TempDir() + "nccl-store-" + std::to_string(::getpid());
  ASSERT_EQ(
      std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()),
      0);
  std::vector<std::string> ids =
      shareAmong(*nccl, 3, [&] { return openDirectoryStore(dir); });
  ASSERT_EQ(ids[0].size(), sizeof(ncclUniqueId::internal)) << ids[0];
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[2], ids[0]);
  EXPECT_NE(nccl->describe().find("NCCL 2."), std::string::npos)
      << nccl->describe();
}

TEST(NcclBootstrapTest, TheUniqueIdReachesEveryRankThroughTheTcpStore) {
  std::string reason;
  std::shared_ptr<const NcclLibrary> nccl = ncclOrSkip(reason);
  if (!nccl)
    GTEST_SKIP() << "no NCCL here: " << reason;
  std::random_device random;
  std::unique_ptr<TcpStoreServer> server;
  int port = 0;
  for (int attempt = 0; attempt < 20 && !server; ++attempt) {
    port = 20000 + static_cast<int>(random() % 20000);
    StatusOr<std::unique_ptr<TcpStoreServer>> started =
        TcpStoreServer::start("127.0.0.1", port, kToken);
    if (started.ok())
      server = std::move(*started);
  }
  ASSERT_TRUE(server) << "no free port";
  std::vector<std::string> ids = shareAmong(*nccl, 3, [&] {
    return connectTcpStore("127.0.0.1", port, kToken, 10s);
  });
  ASSERT_EQ(ids[0].size(), sizeof(ncclUniqueId::internal)) << ids[0];
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[2], ids[0]);
}

TEST(NcclBootstrapTest, AnIdOfAnotherSizeIsRefused) {
  std::string reason;
  std::shared_ptr<const NcclLibrary> nccl = ncclOrSkip(reason);
  if (!nccl)
    GTEST_SKIP() << "no NCCL here: " << reason;
  std::string dir =
      ::testing::TempDir() + "nccl-short-" + std::to_string(::getpid());
  ASSERT_EQ(
      std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()),
      0);
  std::unique_ptr<RendezvousStore> store = openDirectoryStore(dir);
  ASSERT_TRUE(
      store->set("trellis.nccl.world", std::vector<char>(16, 'x')).ok());
  StatusOr<ncclUniqueId> id =
      shareUniqueId(*nccl, *store, 1, "trellis.nccl.world", 1s);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().message(),
            "nccl: the unique id under 'trellis.nccl.world' has 16 bytes, "
            "expected 128 (ranks of different NCCL versions?)");
}

/// Whether no rank is an end of two links of one round.
bool roundsAreDisjoint(const std::vector<TransferLink> &links,
                       const std::vector<int> &rounds) {
  std::set<std::pair<int, int64_t>> taken;
  for (size_t i = 0; i < links.size(); ++i)
    if (!taken.insert({rounds[i], links[i].from}).second ||
        !taken.insert({rounds[i], links[i].to}).second)
      return false;
  return true;
}

TEST(NcclLinkTest, EachRoundConnectsARankToOneLinkAtMost) {
  // Four stages both ways: each link in the first round free at both ends.
  std::vector<TransferLink> chain = {{0, 1}, {1, 0}, {1, 2},
                                     {2, 1}, {2, 3}, {3, 2}};
  EXPECT_EQ(linkRounds(chain), (std::vector<int>{0, 1, 2, 3, 0, 1}));
  // Eight stages in a ring (interleaved: the last sends to the first),
  // times two data-parallel replicas: four rounds.
  std::vector<TransferLink> ring;
  for (int64_t replica = 0; replica < 2; ++replica)
    for (int64_t stage = 0; stage < 8; ++stage) {
      int64_t rank = stage * 2 + replica;
      int64_t next = (stage + 1) % 8 * 2 + replica;
      ring.push_back({rank, next});
      ring.push_back({next, rank});
    }
  std::sort(ring.begin(), ring.end());
  std::vector<int> rounds = linkRounds(ring);
  EXPECT_TRUE(roundsAreDisjoint(ring, rounds));
  EXPECT_EQ(*std::max_element(rounds.begin(), rounds.end()), 3);
  EXPECT_TRUE(linkRounds({}).empty());
}

} // namespace
