//===- ShardLayoutTest.cpp - Where a rank's shard sits in a global tensor -===//

#include "trellis/Runtime/ShardLayout.h"

#include <gtest/gtest.h>

using namespace trellis;
using namespace trellis::runtime;

namespace {

Mesh meshOf(std::string_view text) {
  MeshError error;
  std::optional<Mesh> mesh = Mesh::parse(text, &error);
  EXPECT_TRUE(mesh.has_value()) << error.message;
  return *mesh;
}

TEST(ShardLayoutTest, PaddedPiecesSkipWhatLiesPastTheWholeTensor) {
  // 6 rows over 4 ranks: pieces of 2; rank 2 holds rows 4 and 5, rank 3
  // rows 6 and 7, both padding.
  Mesh mesh = meshOf("dp=4");
  std::vector<std::vector<size_t>> sharding = {{0}, {}};
  auto visited = [&](int64_t rank) {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    ShardLayout::of({2, 3}, sharding, mesh, rank, {6, 3})
        .forEach([&](int64_t l, int64_t g) { pairs.emplace_back(l, g); });
    return pairs;
  };
  EXPECT_EQ(visited(2), (std::vector<std::pair<int64_t, int64_t>>{
                            {0, 12}, {1, 13}, {2, 14}, {3, 15}, {4, 16},
                            {5, 17}}));
  EXPECT_TRUE(visited(3).empty());
  ShardLayout layout = ShardLayout::of({2, 3}, sharding, mesh, 1, {6, 3});
  EXPECT_EQ(layout.globalShape, (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{2, 0}));
}

TEST(ShardLayoutTest, WithoutAGlobalShapePiecesTileTheTensor) {
  Mesh mesh = meshOf("dp=2,tp=2");
  ShardLayout layout = ShardLayout::of({2, 3}, {{}, {1}}, mesh, 3);
  EXPECT_EQ(layout.globalShape, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 3}));
  int64_t count = 0;
  layout.forEach([&](int64_t, int64_t) { ++count; });
  EXPECT_EQ(count, 6);
}

} // namespace
