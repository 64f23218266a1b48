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

// Tests that reads are bounded and kind-checked: the whole file within its
// bound, a larger one refused before it is read, a device or FIFO refused
// unread (never read without end or waited on).
TEST_F(FileKindTest, ReadsRegularFilesWithinTheirBound) {
  std::string file = dir_ + "/file";
  std::FILE *handle = std::fopen(file.c_str(), "w");
  ASSERT_NE(handle, nullptr);
  std::string text(3000, 'x');
  std::fputs(text.c_str(), handle);
  std::fclose(handle);
  std::string contents;
  EXPECT_EQ(readRegularFile(file, contents, 3000), "");
  EXPECT_EQ(contents, text);
  EXPECT_EQ(readRegularFile(file, contents, 2999),
            "is 3000 bytes, more than the 2999 bytes such a file may hold");
  size_t chunks = 0, bytes = 0;
  EXPECT_EQ(readRegularFileChunks(file, 4096,
                                  [&](const char *, size_t size) {
                                    ++chunks;
                                    bytes += size;
                                  }),
            "");
  EXPECT_EQ(bytes, 3000u);
  EXPECT_GE(chunks, 1u);

  EXPECT_EQ(readRegularFile("/dev/zero", contents, 1 << 20),
            "is a character device");
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(readRegularFile(fifo, contents, 1 << 20), "is a FIFO");
  EXPECT_EQ(readRegularFile(dir_, contents, 1 << 20), "is a directory");
  EXPECT_EQ(formatBytes(int64_t(198) << 20), "198.0 MiB");
  EXPECT_EQ(formatBytes(int64_t(20) << 30), "20.0 GiB");
}

} // namespace
} // namespace trellis
