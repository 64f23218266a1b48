//===- FileKindTest.cpp - What a path names -------------------------------===//

#include "trellis/Common/FileKind.h"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace trellis {
namespace {

/// A fresh directory under TMPDIR, removed with its entries at the end.
class FileKindTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern =
        std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
        "/trellis-filekind-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const char *name : {"file", "fifo", "socket"})
      std::remove((dir_ + "/" + name).c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(FileKindTest, NamesWhatAPathIsInstead) {
  std::string file = dir_ + "/file";
  std::FILE *handle = std::fopen(file.c_str(), "w");
  ASSERT_NE(handle, nullptr);
  std::fclose(handle);
  EXPECT_EQ(whyNotRegularFile(file), "");
  EXPECT_EQ(whyNotDirectory(file), "is a regular file");

  EXPECT_EQ(whyNotRegularFile(dir_), "is a directory");
  EXPECT_EQ(whyNotDirectory(dir_), "");

  EXPECT_EQ(whyNotRegularFile(dir_ + "/missing"), "does not exist");
  EXPECT_EQ(whyNotDirectory(dir_ + "/missing"), "does not exist");

  EXPECT_EQ(whyNotRegularFile("/dev/zero"), "is a character device");

  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(whyNotRegularFile(fifo), "is a FIFO");

  std::string socketPath = dir_ + "/socket";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  socketPath.copy(address.sun_path, sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&address),
                   sizeof(address)),
            0);
  EXPECT_EQ(whyNotRegularFile(socketPath), "is a socket");
  ::close(fd);

  // A path through a regular file cannot be examined.
  EXPECT_EQ(whyNotRegularFile(file + "/below").rfind("cannot be examined: ", 0),
            0u);
}

} // namespace
} // namespace trellis
