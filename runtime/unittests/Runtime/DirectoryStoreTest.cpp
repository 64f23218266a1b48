//===- DirectoryStoreTest.cpp - The rendezvous store in a directory -------===//

#include "trellis/Runtime/Rendezvous.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

namespace trellis::runtime {
namespace {

using namespace std::chrono_literals;

std::string freshDirectory() {
  std::string pattern = ::testing::TempDir() + "/trellis-store-XXXXXX";
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

TEST(DirectoryStoreTest, AnyKeyAndValueRoundTripBetweenStores) {
  std::string dir = freshDirectory();
  std::unique_ptr<RendezvousStore> writer = openDirectoryStore(dir),
                                   reader = openDirectoryStore(dir);
  // Keys with separators and a leading dot; an empty and a binary value.
  std::vector<std::pair<std::string, std::vector<char>>> entries = {
      {"dp/0/rank_1", {'a', '\0', 'b'}}, {"..", {}}, {"%41", {'x'}}};
  for (const auto &[key, value] : entries)
    ASSERT_TRUE(writer->set(key, value).ok()) << key;
  for (const auto &[key, value] : entries) {
    StatusOr<std::vector<char>> read = reader->get(key, 1000ms);
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_EQ(*read, value) << key;
  }
  std::filesystem::remove_all(dir);
}

TEST(DirectoryStoreTest, AKeyIsClaimedOnce) {
  std::string dir = freshDirectory();
  std::unique_ptr<RendezvousStore> first = openDirectoryStore(dir),
                                   second = openDirectoryStore(dir);
  StatusOr<std::vector<char>> won = first->claim("rank/0", {'a'});
  ASSERT_TRUE(won.ok()) << won.status().message();
  EXPECT_EQ(*won, std::vector<char>{'a'});
  StatusOr<std::vector<char>> lost = second->claim("rank/0", {'b'});
  ASSERT_TRUE(lost.ok()) << lost.status().message();
  EXPECT_EQ(*lost, std::vector<char>{'a'});
  // No temporary file is left behind by either.
  int files = 0;
  for (const auto &entry : std::filesystem::directory_iterator(dir))
    files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(dir);
}

TEST(DirectoryStoreTest, AReadWaitsForTheWriter) {
  std::string dir = freshDirectory();
  std::unique_ptr<RendezvousStore> writer = openDirectoryStore(dir),
                                   reader = openDirectoryStore(dir);
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(writer->set("late", {'1'}).ok());
  });
  StatusOr<std::vector<char>> read = reader->get("late", 5000ms);
  late.join();
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, std::vector<char>{'1'});
  std::filesystem::remove_all(dir);
}

TEST(DirectoryStoreTest, ATimeoutNamesTheKeyAndTheDirectory) {
  std::string dir = freshDirectory();
  StatusOr<std::vector<char>> read =
      openDirectoryStore(dir)->get("never-set", 50ms);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            "store: timed out waiting for never-set in " + dir);
  std::filesystem::remove_all(dir);
}

TEST(DirectoryStoreTest, AnUnwritableDirectoryIsAnError) {
  Status status =
      openDirectoryStore("/nonexistent/trellis-store")->set("key", {'x'});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("store: cannot write /nonexistent/", 0), 0u)
      << status.message();
}

} // namespace
} // namespace trellis::runtime
