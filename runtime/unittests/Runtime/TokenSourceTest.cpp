//===- TokenSourceTest.cpp - Batches from token files ---------------------===//

#include "trellis/Runtime/TokenSource.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
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

/// Ids first, first + 1, ..., first + count - 1.
std::vector<uint16_t> counting(uint16_t first, int count) {
  std::vector<uint16_t> ids(count);
  for (int i = 0; i < count; ++i)
    ids[i] = static_cast<uint16_t>(first + i);
  return ids;
}

std::unique_ptr<TokenSource> open(const std::string &data,
                                  const std::string &order = "random",
                                  int64_t vocab = 1000) {
  StatusOr<std::unique_ptr<TokenSource>> source =
      openTokenData(data, "uint16", order, 0, vocab);
  EXPECT_TRUE(source.ok()) << source.status().message();
  return source.ok() ? std::move(*source) : nullptr;
}

TEST(TokenSourceTest, WindowsComeFromTheFile) {
  std::string path = tempPath("tokens.bin");
  writeTokens(path, {1, 2, 3, 4, 5, 6, 7, 8});
  std::unique_ptr<TokenSource> source = open(path, "random", 16);
  ASSERT_TRUE(source);
  std::vector<int32_t> tokens(3), targets(3);
  ASSERT_TRUE(source->fill({}, 1, 3, tokens.data(), targets.data()).ok());
  // Each target is the token after its input.
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(targets[i], tokens[i] + 1);
  EXPECT_EQ(source->identity().rfind("file of 8 tokens, crc32 ", 0), 0u)
      << source->identity();
  EXPECT_EQ(makeSyntheticTokens(0, 16, false)->identity(), "synthetic");
  EXPECT_EQ(makeSyntheticTokens(0, 16, true)->identity(), "repeat");
}

TEST(TokenSourceTest, SequentialWindowsFollowEachOtherAndWrap) {
  std::string path = tempPath("sequential.bin");
  writeTokens(path, counting(0, 10));
  std::unique_ptr<TokenSource> source = open(path, "sequential");
  ASSERT_TRUE(source);
  EXPECT_EQ(source->identity().find(", sequential"),
            source->identity().size() - 12);
  // Windows of 4 ids start 3 apart: 0-3, 3-6, 6-9, then again from 0.
  std::vector<int32_t> tokens(6), targets(6);
  ASSERT_TRUE(source->fill({0, 0}, 2, 3, tokens.data(), targets.data()).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(targets, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(source->fill({1, 2}, 2, 3, tokens.data(), targets.data()).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{6, 7, 8, 0, 1, 2}));
  EXPECT_EQ(targets, (std::vector<int32_t>{7, 8, 9, 1, 2, 3}));
}

TEST(TokenSourceTest, ADirectoryIsItsShardsInNameOrder) {
  std::string dir = tempPath("shards");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  writeTokens(dir + "/b.bin", counting(5, 5));
  writeTokens(dir + "/a.bin", counting(0, 5));
  writeTokens(dir + "/.hidden", {999});
  std::unique_ptr<TokenSource> source = open(dir, "sequential");
  ASSERT_TRUE(source);
  EXPECT_EQ(source->identity().rfind("2 files of 10 tokens, crc32 ", 0), 0u)
      << source->identity();
  // A window across the shards' boundary reads on into the next.
  std::vector<int32_t> tokens(4), targets(4);
  ASSERT_TRUE(source->fill({0, 1}, 1, 4, tokens.data(), targets.data()).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(targets, (std::vector<int32_t>{5, 6, 7, 8}));
}

TEST(TokenSourceTest, ABlendGivesEveryPrefixItsShares) {
  std::string many = tempPath("many.bin"), few = tempPath("few-ids.bin");
  writeTokens(many, counting(0, 100));
  writeTokens(few, counting(500, 100));
  std::unique_ptr<TokenSource> source =
      open("3:" + many + ",1:" + few, "sequential");
  ASSERT_TRUE(source);
  EXPECT_EQ(source->identity().rfind("blend of 0.75 x file of 100 tokens", 0),
            0u)
      << source->identity();
  // 40 windows of 2 ids: 30 from the first file, 10 from the second, and
  // in every prefix of 4 windows 3 and 1.
  std::vector<int32_t> tokens(80), targets(80);
  ASSERT_TRUE(source->fill({0, 0}, 40, 2, tokens.data(), targets.data()).ok());
  int first = 0;
  for (int row = 0; row < 40; ++row) {
    first += tokens[row * 2] < 500;
    if (row % 4 == 3) {
      EXPECT_EQ(first, (row + 1) / 4 * 3) << row;
    }
  }
  // Each component is read in its own order: the first file's windows
  // start at 0, 2, 4, ...
  std::vector<int32_t> starts;
  for (int row = 0; row < 40; ++row)
    if (tokens[row * 2] < 500)
      starts.push_back(tokens[row * 2]);
  for (size_t i = 0; i < starts.size(); ++i)
    EXPECT_EQ(starts[i], static_cast<int32_t>(2 * i));
  // A batch starting later in the run (a resumed one) continues the same
  // sequence.
  std::vector<int32_t> later(20), laterTargets(20);
  ASSERT_TRUE(
      source->fill({7, 30}, 10, 2, later.data(), laterTargets.data()).ok());
  EXPECT_EQ(later, std::vector<int32_t>(tokens.begin() + 60, tokens.end()));
  std::unique_ptr<TokenSource> fresh =
      open("3:" + many + ",1:" + few, "sequential");
  ASSERT_TRUE(
      fresh->fill({7, 30}, 10, 2, later.data(), laterTargets.data()).ok());
  EXPECT_EQ(later, std::vector<int32_t>(tokens.begin() + 60, tokens.end()));
}

TEST(TokenSourceTest, RandomBlendsDrawFromEachComponent) {
  std::string many = tempPath("r-many.bin"), few = tempPath("r-few.bin");
  writeTokens(many, counting(0, 100));
  writeTokens(few, counting(500, 100));
  std::unique_ptr<TokenSource> source = open("1:" + many + ",1:" + few);
  ASSERT_TRUE(source);
  std::vector<int32_t> tokens(40), targets(40);
  ASSERT_TRUE(source->fill({0, 0}, 10, 4, tokens.data(), targets.data()).ok());
  for (int row = 0; row < 10; ++row) {
    // Alternating components; each window contiguous.
    EXPECT_EQ(tokens[row * 4] >= 500, row % 2 == 1) << row;
    for (int s = 0; s < 4; ++s)
      EXPECT_EQ(targets[row * 4 + s], tokens[row * 4 + s] + 1);
  }
}

TEST(TokenSourceTest, ParsesBlendsAndRefusesMalformedOnes) {
  StatusOr<std::vector<DataComponent>> plain = parseDataComponents("a.bin");
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->size(), 1u);
  EXPECT_EQ((*plain)[0].path, "a.bin");
  StatusOr<std::vector<DataComponent>> blend =
      parseDataComponents("0.2:a.bin,0.6:dir/");
  ASSERT_TRUE(blend.ok()) << blend.status().message();
  ASSERT_EQ(blend->size(), 2u);
  EXPECT_DOUBLE_EQ((*blend)[0].weight, 0.25);
  EXPECT_EQ((*blend)[1].path, "dir/");
  for (auto [text, entry] :
       std::map<std::string, std::string>{{"1:a.bin,b.bin", "b.bin"},
                                          {"1:a.bin,0:b.bin", "0:b.bin"},
                                          {"1:a.bin,-1:b.bin", "-1:b.bin"},
                                          {"1:a.bin,2:", "2:"},
                                          {"1:a.bin,", ""}}) {
    StatusOr<std::vector<DataComponent>> parsed = parseDataComponents(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().message(),
              "--data: expected a blend WEIGHT:PATH,WEIGHT:PATH with weights "
              "> 0, found the entry '" +
                  entry + "'");
  }
}

TEST(TokenSourceTest, RejectsWhatIsNotTokenData) {
  std::string path = tempPath("few.bin");
  writeTokens(path, {1, 2});
  StatusOr<std::unique_ptr<TokenSource>> source =
      openTokenData(path, "int8", "random", 0, 16);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(),
            "expected token dtype uint16 or uint32, found 'int8'");
  source = openTokenData(path, "uint16", "shuffled", 0, 16);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(),
            "expected --data-order random or sequential, found 'shuffled'");

  source = openTokenData(tempPath("absent.bin"), "uint16", "random", 0, 16);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(),
            "cannot open token file '" + tempPath("absent.bin") +
                "': it does not exist, expected a file of uint16 token ids");

  std::string empty = tempPath("empty-shards");
  std::filesystem::create_directories(empty);
  source = openTokenData(empty, "uint16", "random", 0, 16);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(),
            "token directory '" + empty +
                "' holds no files, expected shards of uint16 token ids");

  std::string nothing = tempPath("nothing.bin");
  writeTokens(nothing, {});
  source = openTokenData(nothing, "uint16", "random", 0, 16);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(),
            "token file '" + nothing + "' has 0 bytes, no ids (uint16)");

  // Two tokens make no window of four.
  source = openTokenData(path, "uint16", "random", 0, 16);
  ASSERT_TRUE(source.ok());
  std::vector<int32_t> tokens(4), targets(4);
  Status filled = (*source)->fill({}, 1, 4, tokens.data(), targets.data());
  ASSERT_FALSE(filled.ok());
  EXPECT_EQ(filled.message(),
            "token file holds 2 tokens; a window of seq + 1 = 5 needs more");
  // In a blend, the component is named.
  source = openTokenData("1:" + path + ",1:" + tempPath("tokens.bin"), "uint16",
                         "random", 0, 16);
  ASSERT_TRUE(source.ok()) << source.status().message();
  filled = (*source)->fill({}, 1, 4, tokens.data(), targets.data());
  ASSERT_FALSE(filled.ok());
  EXPECT_EQ(filled.message(), "token data '" + path +
                                  "' holds 2 tokens; a window of seq + 1 = "
                                  "5 needs more");
}

} // namespace
} // namespace trellis::runtime
