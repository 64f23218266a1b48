//===- TraceTest.cpp - Measured timelines as Chrome traces ----------------===//

#include "trellis/Runtime/Trace.h"

#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace trellis::runtime;
using json = nlohmann::json;

namespace {

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + name;
}

json readJson(const std::string &path) {
  std::ifstream file(path);
  return json::parse(file, nullptr, /*allow_exceptions=*/false);
}

TEST(TraceTest, MergesRanksOnOneTimeOrigin) {
  std::string path = tempPath("merged.json");
  ASSERT_TRUE(writeRankTrace(
                  rankTracePath(path, 0), 0,
                  {{"matmul", 1000, 1500, TraceSlice::Lane::Compute},
                   {"all_reduce", 1200, 1800, TraceSlice::Lane::Communication}})
                  .ok());
  ASSERT_TRUE(writeRankTrace(rankTracePath(path, 1), 1,
                             {{"matmul", 900, 1400, TraceSlice::Lane::Compute}})
                  .ok());
  Status merged = mergeRankTraces(path, 2);
  ASSERT_TRUE(merged.ok()) << merged.message();

  json trace = readJson(path);
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::vector<std::tuple<int64_t, int64_t, std::string, double, double>> slices;
  for (const json &event : trace["traceEvents"])
    if (event["ph"] == "X")
      slices.emplace_back(event["pid"], event["tid"], event["name"],
                          event["ts"], event["dur"]);
  using Slice = std::tuple<int64_t, int64_t, std::string, double, double>;
  // The earliest slice (rank 1's matmul at 900 us) starts at 0.
  EXPECT_EQ(slices, (std::vector<Slice>{{0, 0, "matmul", 100, 500},
                                        {0, 1, "all_reduce", 300, 600},
                                        {1, 0, "matmul", 0, 500}}));
  // The ranks' files are gone.
  EXPECT_FALSE(std::ifstream(rankTracePath(path, 0)).good());
  EXPECT_FALSE(std::ifstream(rankTracePath(path, 1)).good());
}

TEST(TraceTest, MissingOrMalformedRankFilesAreErrors) {
  std::string path = tempPath("broken.json");
  ASSERT_TRUE(writeRankTrace(rankTracePath(path, 0), 0, {}).ok());
  std::remove(rankTracePath(path, 1).c_str());
  Status missing = mergeRankTraces(path, 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), "cannot read the trace of rank 1 ('" +
                                   rankTracePath(path, 1) + "')");

  std::ofstream(rankTracePath(path, 1)) << "{\"traceEvents\": 3";
  Status malformed = mergeRankTraces(path, 2);
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.message(),
            "expected a Chrome trace with traceEvents in '" +
                rankTracePath(path, 1) + "'");
}

TEST(TraceTest, UnwritablePathIsAnError) {
  Status status = writeRankTrace("/nonexistent-dir/trace.json", 0, {});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "cannot write the trace '/nonexistent-dir/trace.json': No such "
            "file or directory");
}

} // namespace
