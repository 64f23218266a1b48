//===- JobAgreementTest.cpp - Ranks agree on the job at rendezvous --------===//
//
// Over the directory store in a temporary directory, with each rank on its
// own thread.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Rendezvous.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

namespace trellis::runtime {
namespace {

using namespace std::chrono_literals;

std::string freshDirectory() {
  std::string pattern = ::testing::TempDir() + "/trellis-agree-XXXXXX";
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

TEST(JobAgreementTest, EqualFieldsAgreeAndTheFirstDifferenceIsNamed) {
  std::string dir = freshDirectory();
  std::unique_ptr<RendezvousStore> store0 = openDirectoryStore(dir),
                                   store1 = openDirectoryStore(dir),
                                   store2 = openDirectoryStore(dir);
  JobFields fields = {{"plan", "crc32 1"}, {"seed", "0"}};
  JobFields other = {{"plan", "crc32 1"}, {"seed", "7"}};
  std::vector<Status> results(3, Status::success());
  std::thread one([&] { results[1] = agreeOnJob(*store1, 1, 3, fields, 5000ms); });
  std::thread two([&] { results[2] = agreeOnJob(*store2, 2, 3, other, 5000ms); });
  results[0] = agreeOnJob(*store0, 0, 3, fields, 5000ms);
  one.join();
  two.join();
  // Every rank hears rank 0's one verdict.
  for (const Status &status : results) {
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.message(),
              "rank 2 does not run the same job as rank 0: its seed is 7, "
              "rank 0's is 0 (every rank must start with the same plan and "
              "options)");
  }
  std::filesystem::remove_all(dir);
}

TEST(JobAgreementTest, ARankThatNeverArrivesIsNamed) {
  std::string dir = freshDirectory();
  std::unique_ptr<RendezvousStore> store = openDirectoryStore(dir);
  Status status = agreeOnJob(*store, 0, 2, {{"plan", "crc32 1"}}, 300ms);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("rendezvous: waiting for rank 1: ", 0), 0u)
      << status.message();
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace trellis::runtime
