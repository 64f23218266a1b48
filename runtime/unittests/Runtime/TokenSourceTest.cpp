//===- TokenSourceTest.cpp - Batches from token files ---------------------===//

#include "trellis/Runtime/TokenSource.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace trellis::runtime {
namespace {

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "/" + name;
}

void writeTokens(const std::string &path, const std::vector<uint16_t> &ids) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char *>(ids.data()), ids.size() * 2);
}

TEST(TokenSourceTest, WindowsComeFromTheFile) {
  std::string path = tempPath("tokens.bin");
  writeTokens(path, {1, 2, 3, 4, 5, 6, 7, 8});
  StatusOr<std::unique_ptr<TokenSource>> source =
      openTokenFile(path, "uint16", 0, 16);
  ASSERT_TRUE(source.ok()) << source.status().message();
  std::vector<int32_t> tokens(3), targets(3);
  ASSERT_TRUE((*source)->fill(0, 1, 3, tokens.data(), targets.data()).ok());
  // Each target is the token after its input.
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(targets[i], tokens[i] + 1);
  EXPECT_EQ((*source)->identity().rfind("file of 8 tokens, crc32 ", 0), 0u)
      << (*source)->identity();
  EXPECT_EQ(makeSyntheticTokens(0, 16, false)->identity(), "synthetic");
  EXPECT_EQ(makeSyntheticTokens(0, 16, true)->identity(), "repeat");
}

TEST(TokenSourceTest, RejectsWhatIsNotATokenFile) {
  std::string path = tempPath("few.bin");
  writeTokens(path, {1, 2});
  StatusOr<std::unique_ptr<TokenSource>> source =
      openTokenFile(path, "int8", 0, 16);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(),
            "expected token dtype uint16 or uint32, found 'int8'");

  source = openTokenFile(tempPath("absent.bin"), "uint16", 0, 16);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(),
            "cannot open token file '" + tempPath("absent.bin") +
                "': it does not exist, expected a file of uint16 token ids");

  // Two tokens make no window of four.
  source = openTokenFile(path, "uint16", 0, 16);
  ASSERT_TRUE(source.ok());
  std::vector<int32_t> tokens(4), targets(4);
  Status filled = (*source)->fill(0, 1, 4, tokens.data(), targets.data());
  ASSERT_FALSE(filled.ok());
  EXPECT_EQ(filled.message(),
            "token file holds 2 tokens; a window of seq + 1 = 5 needs more");
}

} // namespace
} // namespace trellis::runtime
