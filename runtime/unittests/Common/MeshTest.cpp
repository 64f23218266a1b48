//===- MeshTest.cpp - Mesh and process-group arithmetic -------------------===//

#include "trellis/Common/Mesh.h"

#include <gtest/gtest.h>

using namespace trellis;

namespace {

Mesh parseOrDie(std::string_view text) {
  MeshError error;
  std::optional<Mesh> mesh = Mesh::parse(text, &error);
  EXPECT_TRUE(mesh.has_value()) << error.message;
  return *mesh;
}

MeshError parseError(std::string_view text) {
  MeshError error;
  EXPECT_FALSE(Mesh::parse(text, &error).has_value()) << text;
  return error;
}

using Ranks = std::vector<int64_t>;

TEST(MeshTest, RankNumberingIsMajorToMinor) {
  Mesh mesh = parseOrDie("dp=2,pp=2,tp=4");
  EXPECT_EQ(mesh.size(), 16);
  EXPECT_EQ(mesh.coordinates(11), (Ranks{1, 0, 3}));
  EXPECT_EQ(mesh.rank({1, 0, 3}), 11);
  for (int64_t rank = 0; rank < mesh.size(); ++rank)
    EXPECT_EQ(mesh.rank(mesh.coordinates(rank)), rank);
}

TEST(MeshTest, GroupsOfTheSeedExample) {
  Mesh mesh = parseOrDie("dp=2,pp=2,tp=4");
  size_t dp = *mesh.axisIndex("dp"), pp = *mesh.axisIndex("pp"),
         tp = *mesh.axisIndex("tp");
  EXPECT_EQ(mesh.group(0, {tp}), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(mesh.group(3, {dp}), (Ranks{3, 11}));
  EXPECT_EQ(mesh.group(0, {pp}), (Ranks{0, 4}));
  EXPECT_EQ(mesh.group(5, {pp, tp}), (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh.stage(3, pp), 0);
  EXPECT_EQ(mesh.stage(4, pp), 1);
  EXPECT_EQ(mesh.stage(15, pp), 1);
}

TEST(MeshTest, GroupOrderFollowsListedAxes) {
  Mesh mesh = parseOrDie("a=2,b=3");
  // Listing b before a makes b the most significant position digit.
  EXPECT_EQ(mesh.group(0, {1, 0}), (Ranks{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(mesh.groupPosition(4, {1, 0}), 3);
  EXPECT_EQ(mesh.groupPosition(4, {0, 1}), 4);
  for (int64_t rank = 0; rank < mesh.size(); ++rank) {
    Ranks group = mesh.group(rank, {1, 0});
    EXPECT_EQ(group[mesh.groupPosition(rank, {1, 0})], rank);
  }
}

TEST(MeshTest, OneDimensionalMesh) {
  Mesh mesh = parseOrDie("tp=8");
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.group(5, {0}), (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh.groupPosition(5, {0}), 5);
  EXPECT_EQ(mesh.group(5, {}), (Ranks{5}));
  EXPECT_EQ(mesh.allGroups({0}).size(), 1u);
}

TEST(MeshTest, FourDimensionalMesh) {
  Mesh mesh = parseOrDie("dp=2,pp=3,sp=2,tp=2");
  EXPECT_EQ(mesh.size(), 24);
  EXPECT_EQ(mesh.coordinates(23), (Ranks{1, 2, 1, 1}));
  EXPECT_EQ(mesh.group(0, {2}), (Ranks{0, 2}));
  EXPECT_EQ(mesh.group(0, {1}), (Ranks{0, 4, 8}));
  EXPECT_EQ(mesh.group(13, {0}), (Ranks{1, 13}));
  EXPECT_EQ(mesh.groupSize({1, 3}), 6);
  // The groups along any axis set partition the mesh.
  for (std::vector<size_t> axes :
       {std::vector<size_t>{0}, {1}, {2, 3}, {0, 1, 2, 3}, {3, 0}}) {
    std::vector<std::vector<int64_t>> groups = mesh.allGroups(axes);
    EXPECT_EQ(static_cast<int64_t>(groups.size()),
              mesh.size() / mesh.groupSize(axes));
    std::vector<int> seen(mesh.size(), 0);
    for (const Ranks &group : groups)
      for (int64_t rank : group)
        ++seen[rank];
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(),
                            [](int count) { return count == 1; }));
  }
}

TEST(MeshTest, AxesOfSizeOne) {
  Mesh mesh = parseOrDie("dp=1, pp=4 , tp=1");
  EXPECT_EQ(mesh.size(), 4);
  EXPECT_EQ(mesh.group(2, {0}), (Ranks{2}));
  EXPECT_EQ(mesh.group(2, {1}), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(mesh.stage(2, 1), 2);
  EXPECT_EQ(mesh.toString(), "dp=1,pp=4,tp=1");
}

TEST(MeshTest, RoundTripsThroughText) {
  Mesh mesh = parseOrDie("dp=2,pp=2,tp=4");
  EXPECT_EQ(parseOrDie(mesh.toString()), mesh);
}

TEST(MeshTest, NamesWholeCharactersOutsideAscii) {
  // A UTF-8 character whole, never half of one; a byte that starts none
  // by its value.
  MeshError error = parseError("d\xc3\xa9=2");
  EXPECT_EQ(error.message,
            "expected '=' after mesh axis \"d\", found '\xc3\xa9' (mesh axis "
            "names and roles are ASCII letters, digits and '_')");
  error = parseError("\xe2\x82\xac=2");
  EXPECT_EQ(error.message, "expected a mesh axis name, found '\xe2\x82\xac' "
                           "(mesh axis names and roles are ASCII letters, "
                           "digits and '_')");
  error = parseError("dp=2,\xff");
  EXPECT_EQ(error.message,
            "expected a mesh axis name, found byte 0xFF (mesh axis names and "
            "roles are ASCII letters, digits and '_')");
  error = parseError("d\xc3=2");
  EXPECT_EQ(error.message,
            "expected '=' after mesh axis \"d\", found byte 0xC3 (mesh axis "
            "names and roles are ASCII letters, digits and '_')");
}

TEST(MeshTest, RejectsMalformedText) {
  MeshError error = parseError("dp=2,pp=,tp=4");
  EXPECT_EQ(error.column, 9u);
  EXPECT_EQ(error.message,
            "expected an integer size for mesh axis \"pp\", found ','");
  error = parseError("dp=2;tp=4");
  EXPECT_EQ(error.column, 5u);
  EXPECT_EQ(error.message,
            "expected ',' or end of input after a mesh axis, found ';'");
  error = parseError("");
  EXPECT_EQ(error.message, "expected a mesh axis name, found end of input");
  error = parseError("dp 2");
  EXPECT_EQ(error.message, "expected '=' after mesh axis \"dp\", found '2'");
  error = parseError("dp=2,");
  EXPECT_EQ(error.column, 6u);
  error = parseError("2=2");
  EXPECT_EQ(error.message, "expected a mesh axis name, found '2'");
  error = parseError("dp=99999999999999999999");
  EXPECT_EQ(error.message,
            "size of mesh axis \"dp\" is too large: 99999999999999999999");
}

TEST(MeshTest, RejectsDuplicateAxes) {
  MeshError error = parseError("dp=2,tp=2,dp=4");
  EXPECT_EQ(error.column, 11u);
  EXPECT_EQ(error.message, "mesh axis \"dp\" is declared twice");
}

TEST(MeshTest, RejectsSizesBelowOne) {
  EXPECT_EQ(parseError("dp=0").message,
            "expected mesh axis \"dp\" to have a size >= 1, found 0");
  EXPECT_EQ(parseError("dp=-3").message,
            "expected mesh axis \"dp\" to have a size >= 1, found -3");
  MeshError error;
  EXPECT_FALSE(Mesh::create({{"tp", 0}}, &error));
  EXPECT_EQ(error.message,
            "expected mesh axis \"tp\" to have a size >= 1, found 0");
  EXPECT_FALSE(Mesh::create({}, &error));
  EXPECT_EQ(error.message, "expected at least one mesh axis, found none");
}

TEST(MeshTest, RejectsOverflowingSize) {
  MeshError error;
  EXPECT_FALSE(
      Mesh::create({{"a", int64_t(1) << 40}, {"b", int64_t(1) << 40}}, &error));
  EXPECT_EQ(error.message, "mesh size overflows a 64-bit integer");
}

TEST(MeshTest, ChecksWorldSize) {
  Mesh mesh = parseOrDie("dp=2,tp=4");
  MeshError error;
  EXPECT_TRUE(mesh.matchesWorldSize(8, &error));
  EXPECT_FALSE(mesh.matchesWorldSize(4, &error));
  EXPECT_EQ(error.message,
            "mesh dp=2,tp=4 has 8 ranks but the world size is 4");
}

TEST(MeshTest, FormatsRankSets) {
  EXPECT_EQ(formatRankSet({}), "{}");
  EXPECT_EQ(formatRankSet({3, 11}), "{3,11}");
}

TEST(MeshTest, AnAxisNeedsAName) {
  MeshError error;
  EXPECT_FALSE(Mesh::create({{"", 2}}, &error).has_value());
  EXPECT_EQ(error.message, "expected a non-empty mesh axis name");
}

TEST(MeshTest, WellKnownNamesImplyTheirRoles) {
  Mesh mesh = parseOrDie("pp=2,dp_replicate=2,dp_shard=2,ep=2,cp=2,tp=2,x=1");
  std::vector<AxisRole> roles;
  for (const MeshAxis &axis : mesh.axes())
    roles.push_back(axis.role);
  EXPECT_EQ(roles, (std::vector<AxisRole>{AxisRole::Pipeline, AxisRole::Data,
                                          AxisRole::Data, AxisRole::Expert,
                                          AxisRole::Context, AxisRole::Tensor,
                                          AxisRole::Unassigned}));
}

TEST(MeshTest, AnyNameTakesAStatedRole) {
  Mesh mesh = parseOrDie("model:tensor=2, replica : data=2,shard:data=4");
  EXPECT_EQ(mesh.axesWithRole(AxisRole::Data), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(mesh.roleSize(AxisRole::Data), 8);
  EXPECT_EQ(mesh.roleSize(AxisRole::Tensor), 2);
  EXPECT_EQ(mesh.roleSize(AxisRole::Pipeline), 1);
  EXPECT_EQ(mesh.toString(), "model:tensor=2,replica:data=2,shard:data=4");
  EXPECT_EQ(parseOrDie(mesh.toString()), mesh);
}

TEST(MeshTest, TheBatchSplitsOverDataAndExpertAxes) {
  Mesh mesh = parseOrDie("pp=2,dp=2,ep=2,tp=2");
  EXPECT_EQ(mesh.batchAxes(), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(mesh.groupSize(mesh.batchAxes()), 4);
}

TEST(MeshTest, AStatedRoleOverridesTheName) {
  Mesh mesh = parseOrDie("tp:data=4");
  EXPECT_EQ(mesh.axes()[0].role, AxisRole::Data);
  EXPECT_EQ(mesh.toString(), "tp:data=4");
}

TEST(MeshTest, RejectsUnknownRoles) {
  MeshError error = parseError("dp=2,rows:row=2");
  EXPECT_EQ(error.column, 11u);
  EXPECT_EQ(error.message, "expected a role for mesh axis \"rows\" (data, "
                           "tensor, pipeline, context or expert), found 'row'");
  error = parseError("rows:=2");
  EXPECT_EQ(error.message, "expected a role for mesh axis \"rows\" (data, "
                           "tensor, pipeline, context or expert), found '='");
}

TEST(MeshTest, RoleNamesRoundTrip) {
  for (AxisRole role : {AxisRole::Data, AxisRole::Tensor, AxisRole::Pipeline,
                        AxisRole::Context, AxisRole::Expert})
    EXPECT_EQ(parseAxisRole(axisRoleName(role)), role);
  EXPECT_EQ(axisRoleName(AxisRole::Unassigned), "unassigned");
  EXPECT_FALSE(parseAxisRole("unassigned").has_value());
}

} // namespace
