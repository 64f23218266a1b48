//===- OuterLaunchTest.cpp - Ranks from torchrun, mpirun and srun ---------===//

#include "trellis/Runtime/OuterLaunch.h"
#include "trellis/Runtime/TrainOptions.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace trellis::runtime;

namespace {

using Environment = std::map<std::string, std::string>;

StatusOr<std::optional<OuterLaunch>> detect(const Environment &variables) {
  return detectOuterLaunch([&](const char *name) -> const char * {
    auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

void expectError(const Environment &variables, const std::string &message) {
  StatusOr<std::optional<OuterLaunch>> launch = detect(variables);
  ASSERT_FALSE(launch.ok()) << "accepted; expected: " << message;
  EXPECT_NE(launch.status().message().find(message), std::string::npos)
      << launch.status().message();
}

const Environment kTorchrun = {{"RANK", "3"},
                               {"WORLD_SIZE", "4"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "node0"},
                               {"MASTER_PORT", "29400"},
                               {"TORCHELASTIC_USE_AGENT_STORE", "True"}};

TEST(OuterLaunchTest, ReadsTorchrunsVariables) {
  StatusOr<std::optional<OuterLaunch>> launch = detect(kTorchrun);
  ASSERT_TRUE(launch.ok()) << launch.status().message();
  ASSERT_TRUE(*launch);
  EXPECT_EQ((*launch)->launcher, "torchrun");
  EXPECT_EQ((*launch)->rank, 3);
  EXPECT_EQ((*launch)->worldSize, 4);
  EXPECT_EQ((*launch)->localRank, 1);
  EXPECT_EQ((*launch)->localWorldSize, 2);
  EXPECT_EQ((*launch)->storeHost, "node0");
  EXPECT_EQ((*launch)->storePort, 29400);
  EXPECT_TRUE((*launch)->storePortTaken);
}

TEST(OuterLaunchTest, TorchrunsAgentStoreMovesOursToTheNextPort) {
  OuterLaunch launch = **detect(kTorchrun);
  TrainOptions options;
  ASSERT_TRUE(adoptOuterLaunch(launch, options).ok());
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.worldSize, 4);
  EXPECT_EQ(options.localRank, 1);
  EXPECT_EQ(options.ranksOnNode, 2);
  EXPECT_EQ(options.masterAddr, "node0");
  EXPECT_EQ(options.masterPort, 29401);
  EXPECT_EQ(options.outerLauncher, "torchrun");
  // Two nodes: peers reach this rank by its host's name.
  EXPECT_NE(options.hostname, "127.0.0.1");
  // Options given on the command line win.
  TrainOptions given;
  given.masterAddr = "10.0.0.1";
  given.masterPort = 4000;
  ASSERT_TRUE(adoptOuterLaunch(launch, given).ok());
  EXPECT_EQ(given.masterAddr, "10.0.0.1");
  EXPECT_EQ(given.masterPort, 4000);
}

TEST(OuterLaunchTest, ReadsOpenMpiAndMpich) {
  StatusOr<std::optional<OuterLaunch>> openMpi =
      detect({{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "2"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_TRUE(openMpi.ok()) << openMpi.status().message();
  ASSERT_TRUE(*openMpi);
  EXPECT_EQ((*openMpi)->launcher, "Open MPI");
  EXPECT_EQ((*openMpi)->rank, 1);
  EXPECT_FALSE((*openMpi)->storeHost);
  // One node: the store on this host, on torch's default port.
  TrainOptions options;
  ASSERT_TRUE(adoptOuterLaunch(**openMpi, options).ok());
  EXPECT_EQ(options.masterAddr, "127.0.0.1");
  EXPECT_EQ(options.masterPort, 29500);
  EXPECT_EQ(options.hostname, "127.0.0.1");

  StatusOr<std::optional<OuterLaunch>> mpich =
      detect({{"PMI_RANK", "0"},
              {"PMI_SIZE", "4"},
              {"MPI_LOCALRANKID", "0"},
              {"MPI_LOCALNRANKS", "2"},
              {"MASTER_ADDR", "head"},
              {"MASTER_PORT", "6000"}});
  ASSERT_TRUE(mpich.ok()) << mpich.status().message();
  ASSERT_TRUE(*mpich);
  EXPECT_EQ((*mpich)->launcher, "MPICH");
  EXPECT_EQ((*mpich)->storeHost, "head");
  EXPECT_EQ((*mpich)->storePort, 6000);
  EXPECT_FALSE((*mpich)->storePortTaken);
}

TEST(OuterLaunchTest, ReadsSlurmsVariablesAndNodeList) {
  StatusOr<std::optional<OuterLaunch>> launch =
      detect({{"SLURM_PROCID", "5"},
              {"SLURM_NTASKS", "7"},
              {"SLURM_LOCALID", "0"},
              {"SLURM_NODEID", "3"},
              {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1(x2),1"},
              {"SLURM_STEP_NODELIST", "gpu[007-009,012],cpu1"}});
  ASSERT_TRUE(launch.ok()) << launch.status().message();
  ASSERT_TRUE(*launch);
  EXPECT_EQ((*launch)->launcher, "Slurm");
  EXPECT_EQ((*launch)->rank, 5);
  EXPECT_EQ((*launch)->localWorldSize, 1);
  EXPECT_EQ((*launch)->storeHost, "gpu007");
  EXPECT_FALSE((*launch)->storePort);
}

TEST(OuterLaunchTest, ExpandsTheFirstHostOfASlurmList) {
  EXPECT_EQ(firstSlurmHost("node1"), "node1");
  EXPECT_EQ(firstSlurmHost("node[3-4],other"), "node3");
  EXPECT_EQ(firstSlurmHost("rack[2,5]-n[010-011]"), "rack2-n010");
  EXPECT_EQ(firstSlurmHost("a,b"), "a");
  EXPECT_FALSE(firstSlurmHost("node[3-4"));
  EXPECT_FALSE(firstSlurmHost("node[x]"));
  EXPECT_FALSE(firstSlurmHost(""));
}

TEST(OuterLaunchTest, ReadsSlurmsTasksPerNode) {
  EXPECT_EQ(slurmTasksOnNode("4", 0), 4);
  EXPECT_EQ(slurmTasksOnNode("2(x3),1", 2), 2);
  EXPECT_EQ(slurmTasksOnNode("2(x3),1", 3), 1);
  EXPECT_FALSE(slurmTasksOnNode("2(x3),1", 4));
  EXPECT_FALSE(slurmTasksOnNode("2(x3", 0));
  EXPECT_FALSE(slurmTasksOnNode("0", 0));
}

TEST(OuterLaunchTest, TorchrunWinsOverAnOuterSlurmStep) {
  // srun starts one torchrun agent per node; its workers see both.
  Environment both = kTorchrun;
  both["SLURM_PROCID"] = "1";
  both["SLURM_NTASKS"] = "2";
  both["SLURM_LOCALID"] = "0";
  StatusOr<std::optional<OuterLaunch>> launch = detect(both);
  ASSERT_TRUE(launch.ok()) << launch.status().message();
  EXPECT_EQ((*launch)->launcher, "torchrun");
  EXPECT_EQ((*launch)->rank, 3);
}

TEST(OuterLaunchTest, AJobOfOneRankIsNoOuterLaunch) {
  StatusOr<std::optional<OuterLaunch>> launch = detect({{"SLURM_PROCID", "0"},
                                                        {"SLURM_NTASKS", "1"},
                                                        {"SLURM_LOCALID", "0"},
                                                        {"SLURM_NODEID", "0"}});
  ASSERT_TRUE(launch.ok()) << launch.status().message();
  EXPECT_FALSE(*launch);
  launch = detect({});
  ASSERT_TRUE(launch.ok());
  EXPECT_FALSE(*launch);
}

TEST(OuterLaunchTest, RejectsInconsistentVariables) {
  Environment rankTooLarge = kTorchrun;
  rankTooLarge["RANK"] = "4";
  expectError(rankTooLarge, "started by torchrun, expected RANK in [0, "
                            "WORLD_SIZE), found RANK=4, WORLD_SIZE=4");
  Environment noWorld = kTorchrun;
  noWorld.erase("WORLD_SIZE");
  expectError(noWorld, "expected WORLD_SIZE a count of ranks >= 1, found "
                       "RANK=3, WORLD_SIZE unset");
  Environment localTooLarge = kTorchrun;
  localTooLarge["LOCAL_RANK"] = "2";
  expectError(localTooLarge, "expected LOCAL_RANK in [0, LOCAL_WORLD_SIZE)");
  Environment noAddress = kTorchrun;
  noAddress.erase("MASTER_ADDR");
  expectError(noAddress, "started by torchrun, expected MASTER_ADDR and "
                         "MASTER_PORT (the store's address), found "
                         "MASTER_ADDR unset, MASTER_PORT=29400");
  Environment badPort = kTorchrun;
  badPort["MASTER_PORT"] = "70000";
  expectError(badPort, "started by torchrun, expected MASTER_PORT in [1, "
                       "65535], found '70000'");
  Environment notANumber = kTorchrun;
  notANumber["RANK"] = "3x";
  expectError(notANumber, "expected RANK in [0, WORLD_SIZE), found RANK=3x");
  Environment disagree = kTorchrun;
  disagree["OMPI_COMM_WORLD_RANK"] = "0";
  disagree["OMPI_COMM_WORLD_SIZE"] = "4";
  disagree["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  disagree["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  expectError(disagree, "torchrun's and Open MPI's variables disagree: rank "
                        "3 of 4 against rank 0 of 4; start each rank with "
                        "one launcher");
  expectError({{"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "2"},
               {"SLURM_LOCALID", "0"},
               {"SLURM_NODEID", "0"},
               {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
               {"SLURM_STEP_NODELIST", "n[1-2"}},
              "started by Slurm, cannot read the node list 'n[1-2'");
  expectError({{"SLURM_PROCID", "1"},
               {"SLURM_NTASKS", "2"},
               {"SLURM_LOCALID", "1"},
               {"SLURM_NODEID", "1"},
               {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}},
              "started by Slurm, expected the tasks per node '1(x2)' to give "
              "node 1 more than SLURM_LOCALID 1 tasks");
  expectError(
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}},
      "started by Slurm, expected SLURM_NODEID a node index >= 0, "
      "found SLURM_NODEID unset");
}

TEST(OuterLaunchTest, RefusesOptionsThatStartRanksToo) {
  OuterLaunch launch = **detect(kTorchrun);
  TrainOptions options;
  options.nproc = 2;
  Status status = adoptOuterLaunch(launch, options);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "started by torchrun as rank 3 of 4: --nproc, --nnodes and "
            "--node-rank start ranks with trellis run's own launcher; drop "
            "them");
  TrainOptions meeting;
  meeting.rendezvousDir = "/tmp";
  status = adoptOuterLaunch(launch, meeting);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "started by torchrun as rank 3 of 4: ranks meet through the TCP "
            "store rank 0 serves, not --rendezvous; drop it");
  // torchrun's agent on the last port leaves ours none.
  Environment lastPort = kTorchrun;
  lastPort["MASTER_PORT"] = "65535";
  TrainOptions noPort;
  status = adoptOuterLaunch(**detect(lastPort), noPort);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "started by torchrun as rank 3 of 4: the "
                              "store's port 65536 is out of range; give "
                              "--master-port");
  // Several nodes and no store address anywhere.
  Environment noAddress = {{"OMPI_COMM_WORLD_RANK", "0"},
                           {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  TrainOptions defaults;
  status = adoptOuterLaunch(**detect(noAddress), defaults);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "started by Open MPI as rank 0 of 4 over several nodes: expected "
            "the store's address (rank 0's node) in MASTER_ADDR or "
            "--master-addr");
}

} // namespace
