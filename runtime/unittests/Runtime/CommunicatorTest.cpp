//===- CommunicatorTest.cpp - The CPU backend's collectives, forked ranks -===//
//
// Each test forks one process per rank; a rank checks its own results and
// exits 0 (pass) or with the number of the first failed check.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/HostCollectives.h"

#include "Runtime/ForwardingDevice.h"

#include "trellis/Common/HalfFloat.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <numeric>

using namespace trellis;
using namespace trellis::runtime;

namespace {

/// Runs `body(rank)` in `ranks` forked processes; returns their exit codes.
std::vector<int> runRanks(int ranks, const std::function<int(int)> &body) {
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      std::fflush(stdout);
      _exit(body(rank));
    }
    children.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100);
  }
  return codes;
}

/// The CPU device of this (forked) rank.
Device &rankDevice() {
  static std::unique_ptr<Device> device = ForwardingDevice::cpu();
  return *device;
}

/// Connects through the CPU backend (Gloo).
StatusOr<std::unique_ptr<Communicator>>
connectGloo(const Mesh &mesh, int64_t rank, const std::vector<AxisList> &groups,
            const RendezvousOptions &options) {
  StatusOr<const Backend *> cpu = findBackend("cpu");
  if (!cpu.ok())
    return cpu.status();
  return (*cpu)->connect(rankDevice(), mesh, rank, groups, {}, options);
}

/// The CPU device as a device whose memory the host may not touch: the
/// host collectives stage their values through it (counted).
class StagingDevice : public ForwardingDevice {
public:
  using ForwardingDevice::ForwardingDevice;
  int copiesIn = 0, copiesOut = 0, exchanges = 0;

  bool hostAddressable() const override { return false; }
  Status copyFromHost(const void *host, Tensor &target) override {
    ++copiesIn;
    return ForwardingDevice::copyFromHost(host, target);
  }
  Status copyToHost(const Tensor &source, void *host) override {
    ++copiesOut;
    return ForwardingDevice::copyToHost(source, host);
  }
  int64_t enqueueCommunication(std::function<Status()> work) override {
    ++exchanges;
    return ForwardingDevice::enqueueCommunication(std::move(work));
  }
};

std::string freshStore(const std::string &name) {
  std::string dir =
      ::testing::TempDir() + "store-" + name + "-" + std::to_string(getpid());
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

TEST(CommunicatorTest, CollectivesOverAxesOfATwoByTwoMesh) {
  Mesh mesh = *Mesh::parse("dp=2,tp=2", nullptr);
  AxisList dp = {0}, tp = {1}, both = {0, 1};
  RendezvousOptions options;
  options.storeDir = freshStore("collectives");
  std::vector<int> codes = runRanks(4, [&](int rank) {
    auto connected = connectGloo(mesh, rank, {dp, tp, both}, options);
    if (!connected.ok()) {
      std::fprintf(stderr, "%s\n", connected.status().message().c_str());
      return 1;
    }
    Communicator &comm = **connected;
    int64_t d = rank / 2, t = rank % 2;
    // all_reduce over tp: ranks {2d, 2d+1}.
    std::vector<float> values = {float(rank), float(10 * rank)};
    if (!comm.allReduce(tp, values.data(), 2, DType::F32, ReduceKind::Sum).ok() ||
        values[0] != float(4 * d + 1) || values[1] != float(10 * (4 * d + 1)))
      return 2;
    // max over dp: ranks {t, t+2}.
    values = {float(rank)};
    if (!comm.allReduce(dp, values.data(), 1, DType::F32, ReduceKind::Max).ok() ||
        values[0] != float(t + 2))
      return 3;
    // all_gather over dp, in group order.
    float mine = float(rank);
    std::vector<float> gathered(2);
    if (!comm.allGather(dp, &mine, gathered.data(), 1, DType::F32).ok() ||
        gathered[0] != float(t) || gathered[1] != float(t + 2))
      return 4;
    // all_to_all over the whole mesh: chunk j goes to position j.
    std::vector<float> send(4), received(4);
    for (int j = 0; j < 4; ++j)
      send[j] = float(100 * rank + j);
    if (!comm.allToAll(both, send.data(), received.data(), 1, DType::F32).ok())
      return 5;
    for (int i = 0; i < 4; ++i)
      if (received[i] != float(100 * i + rank))
        return 6;
    // broadcast from position 1 over tp.
    values = {float(rank)};
    if (!comm.broadcast(tp, values.data(), 1, DType::F32, 1).ok() ||
        values[0] != float(2 * d + 1))
      return 7;
    // point to point within tp: position 0 sends, position 1 receives.
    float message = float(rank + 0.5f);
    if (t == 0 && !comm.send(tp, &message, 1, DType::F32, 1, 7).ok())
      return 8;
    if (t == 1 && (!comm.recv(tp, &message, 1, DType::F32, 0, 7).ok() ||
                   message != float(rank - 1 + 0.5f)))
      return 9;
    // permute around the whole mesh by one.
    float out = 0;
    if (!comm.permute(both, &mine, &out, 1, DType::F32, 1).ok() ||
        out != float((rank + 3) % 4))
      return 10;
    return comm.barrier().ok() ? 0 : 11;
  });
  EXPECT_EQ(codes, std::vector<int>(4, 0));
}

/// Point-to-point transfers need a peer: over an axis of one rank they
/// are errors naming the group, not hangs.
TEST(CommunicatorTest, TransfersWithinAGroupOfOneAreErrors) {
  Mesh mesh = *Mesh::parse("dp=2,tp=1", nullptr);
  AxisList tp = {1};
  RendezvousOptions options;
  options.storeDir = freshStore("one");
  std::vector<int> codes = runRanks(2, [&](int rank) {
    auto connected = connectGloo(mesh, rank, {{0}, tp}, options);
    if (!connected.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank,
                   connected.status().message().c_str());
      return 1;
    }
    Communicator &comm = **connected;
    float value = 1;
    Status sent = comm.send(tp, &value, 1, DType::F32, 0, 3);
    if (sent.ok() || sent.message().rfind("send to a group of one rank along ",
                                          0) != 0)
      return 2;
    Status received = comm.recv(tp, &value, 1, DType::F32, 0, 3);
    if (received.ok() ||
        received.message().rfind("recv from a group of one rank along ", 0) !=
            0)
      return 3;
    auto started = comm.startSend(tp, &value, 1, DType::F32, 0, 3);
    if (started.ok() ||
        started.status().message().find(": the group has one rank") ==
            std::string::npos)
      return 4;
    // Neither exits while the other may still be connecting.
    return comm.barrier().ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, std::vector<int>(2, 0));
}

TEST(CommunicatorTest, ReducesAndMovesEveryDtype) {
  // bf16 and f16 sums are taken in fp32 per pair and rounded to nearest
  // even; i32 sums are exact; gathers and transfers move the bytes.
  Mesh mesh = *Mesh::parse("dp=2", nullptr);
  RendezvousOptions options;
  options.storeDir = freshStore("dtypes");
  std::vector<int> codes = runRanks(2, [&](int rank) {
    auto connected = connectGloo(mesh, rank, {{0}}, options);
    if (!connected.ok())
      return 1;
    Communicator &comm = **connected;
    // 1 + 2^-8 on each rank: the fp32 sum 2 + 2^-7 is exact in bf16.
    std::vector<uint16_t> bf16 = {floatToBfloat16(1.0f + 0x1p-8f),
                                  floatToBfloat16(rank ? -3.0f : 5.0f)};
    if (!comm.allReduce({0}, bf16.data(), 2, DType::BF16, ReduceKind::Sum)
             .ok() ||
        bfloat16ToFloat(bf16[0]) != 2.0f || bfloat16ToFloat(bf16[1]) != 2.0f)
      return 2;
    std::vector<uint16_t> f16 = {floatToHalf(rank ? 0.25f : 1000.0f)};
    if (!comm.allReduce({0}, f16.data(), 1, DType::F16, ReduceKind::Max).ok() ||
        halfToFloat(f16[0]) != 1000.0f)
      return 3;
    std::vector<int32_t> ints = {rank + 1, 1 << 29};
    if (!comm.allReduce({0}, ints.data(), 2, DType::I32, ReduceKind::Sum)
             .ok() ||
        ints[0] != 3 || ints[1] != (1 << 30))
      return 4;
    uint16_t mine = floatToBfloat16(float(rank + 1));
    std::vector<uint16_t> gathered(2);
    if (!comm.allGather({0}, &mine, gathered.data(), 1, DType::BF16).ok() ||
        bfloat16ToFloat(gathered[0]) != 1.0f ||
        bfloat16ToFloat(gathered[1]) != 2.0f)
      return 5;
    uint16_t message = floatToHalf(rank ? 0.0f : 0.5f);
    if (rank == 0 && !comm.send({0}, &message, 1, DType::F16, 1, 3).ok())
      return 6;
    if (rank == 1 && (!comm.recv({0}, &message, 1, DType::F16, 0, 3).ok() ||
                      halfToFloat(message) != 0.5f))
      return 7;
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>(2, 0));
}

TEST(CommunicatorTest, ADeadRankFailsTheOthersWithinTheTimeout) {
  Mesh mesh = *Mesh::parse("dp=3", nullptr);
  RendezvousOptions options;
  options.storeDir = freshStore("dead");
  options.timeout = std::chrono::milliseconds(3000);
  std::vector<int> codes = runRanks(3, [&](int rank) {
    auto connected = connectGloo(mesh, rank, {{0}}, options);
    // The dead rank may leave before a survivor finished connecting: that
    // is the same failure, reported by the connection instead.
    if (!connected.ok())
      return connected.status().message().find("group {0,1,2}") !=
                     std::string::npos
                 ? 0
                 : 1;
    if (rank == 2)
      _exit(0); // dies before the collective
    std::vector<float> values(1024, 1.0f);
    Status status =
        (*connected)->allReduce({0}, values.data(), 1024, DType::F32,
                                ReduceKind::Sum);
    if (status.ok())
      return 2;
    bool named = status.message().find("group {0,1,2}") != std::string::npos;
    return named ? 0 : 3;
  });
  EXPECT_EQ(codes, std::vector<int>(3, 0));
}

TEST(CommunicatorTest, TransfersStartAtOnceAndCompleteWhenWaited) {
  // Both ranks start a large send before either receives: started sends
  // must not wait for their receiver (a pipeline's steady state does this).
  Mesh mesh = *Mesh::parse("pp=2", nullptr);
  RendezvousOptions options;
  options.storeDir = freshStore("transfers");
  constexpr int64_t kCount = 1 << 20;
  std::vector<int> codes = runRanks(2, [&](int rank) {
    auto connected = connectGloo(mesh, rank, {{0}}, options);
    if (!connected.ok())
      return 1;
    Communicator &comm = **connected;
    int peer = 1 - rank;
    std::vector<float> out(kCount, static_cast<float>(rank + 1)), in(kCount);
    auto sent = comm.startSend({0}, out.data(), kCount, DType::F32, peer,
                               /*channel=*/rank);
    if (!sent.ok())
      return 2;
    auto received = comm.startRecv({0}, in.data(), kCount, DType::F32, peer, peer);
    if (!received.ok() || !(*received)->wait().ok() || !(*sent)->wait().ok())
      return 3;
    for (float value : in)
      if (value != static_cast<float>(peer + 1))
        return 4;
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>(2, 0));
}

TEST(CommunicatorTest, AVariableAllToAllMovesEachMembersPart) {
  // Rank r sends member j (r + j) % 3 elements of value 10 r + j (none
  // when that is 0), along the second axis of a 2 x 3 mesh; every rank
  // receives its parts in member order.
  Mesh mesh = *Mesh::parse("dp=2,ep=3", nullptr);
  RendezvousOptions options;
  options.storeDir = freshStore("alltoallv");
  std::vector<int> codes = runRanks(6, [&](int rank) {
    auto connected = connectGloo(mesh, rank, {{1}}, options);
    if (!connected.ok())
      return 1;
    Communicator &comm = **connected;
    int64_t self = comm.groupPosition({1});
    std::vector<int64_t> sendCounts, recvCounts;
    std::vector<float> input, expected;
    for (int64_t j = 0; j < 3; ++j) {
      sendCounts.push_back((self + j) % 3);
      recvCounts.push_back((j + self) % 3);
      input.insert(input.end(), sendCounts.back(), 10.0f * self + j);
      expected.insert(expected.end(), recvCounts.back(), 10.0f * j + self);
    }
    std::vector<float> output(expected.size(), -1.0f);
    if (!comm.allToAllV({1}, input.data(), sendCounts, output.data(),
                        recvCounts, DType::F32)
             .ok())
      return 2;
    if (output != expected)
      return 3;
    // Counts of the wrong length, or a part for itself that differs from
    // what it expects, are errors (no member is left waiting: each rank
    // fails before it sends).
    Status wrongLength = comm.allToAllV({1}, input.data(), {1, 2},
                                        output.data(), recvCounts, DType::F32);
    if (wrongLength.message() != "all_to_all_v over a group of 3 ranks got 2 "
                                 "send and 3 receive counts")
      return 4;
    std::vector<int64_t> mismatched = recvCounts;
    mismatched[self] += 1;
    Status selfPart = comm.allToAllV({1}, input.data(), sendCounts,
                                     output.data(), mismatched, DType::F32);
    if (selfPart.message().find("all_to_all_v: this rank sends itself ") != 0)
      return 5;
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>(6, 0));
}

TEST(CommunicatorTest, RejectsARankOutsideTheMesh) {
  Mesh mesh = *Mesh::parse("dp=2", nullptr);
  RendezvousOptions options;
  options.storeDir = freshStore("outside");
  auto connected = connectGloo(mesh, 5, {}, options);
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().message(),
            "rank 5 is outside the mesh of 2 ranks");
}

TEST(CommunicatorTest, HostValuesStageThroughADevicesOwnMemory) {
  Mesh mesh = *Mesh::parse("dp=2", nullptr);
  RendezvousOptions options;
  options.storeDir = freshStore("host-values");
  std::vector<int> codes = runRanks(2, [&](int rank) {
    auto connected = connectGloo(mesh, rank, {{0}}, options);
    if (!connected.ok())
      return 1;
    Communicator &comm = **connected;
    // Where the device's memory is the host's, values go to Gloo directly.
    float loss = float(rank + 1);
    if (!allReduceHostValues(rankDevice(), comm, everyAxis(mesh), &loss, 1,
                             ReduceKind::Max)
             .ok() ||
        loss != 2.0f)
      return 2;
    // Otherwise: copied in, exchanged on the communication stream, copied
    // out, with the same results.
    StagingDevice staging(ForwardingDevice::cpu());
    std::vector<float> values = {float(rank), -float(rank)};
    if (!allReduceHostValues(staging, comm, {0}, values.data(), 2,
                             ReduceKind::Min)
             .ok() ||
        values != std::vector<float>{0.0f, -1.0f})
      return 3;
    std::vector<float> mine = {float(10 * rank), float(10 * rank + 1)};
    std::vector<float> all(4);
    if (!allGatherHostValues(staging, comm, {0}, mine.data(), all.data(), 2)
             .ok() ||
        all != std::vector<float>{0.0f, 1.0f, 10.0f, 11.0f})
      return 4;
    if (staging.copiesIn != 2 || staging.copiesOut != 2 ||
        staging.exchanges != 2)
      return 5;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

} // namespace
