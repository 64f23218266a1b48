//===- ClusterTest.cpp - Cluster descriptions and presets -----------------===//

#include "trellis/Planner/Cluster.h"

#include "gtest/gtest.h"

using namespace trellis::planner;

namespace {

llvm::json::Value parse(llvm::StringRef text) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  EXPECT_TRUE(static_cast<bool>(json));
  return json ? std::move(*json) : llvm::json::Value(nullptr);
}

/// A preset's JSON, edited by `edit`, parsed again.
std::string errorAfter(const std::function<void(llvm::json::Object &)> &edit) {
  llvm::json::Value json = clusterPreset("h100-sxm")->toJson();
  edit(*json.getAsObject());
  std::string error;
  EXPECT_FALSE(parseCluster(json, error).has_value());
  return error;
}

TEST(ClusterTest, PresetsRoundTripThroughTheirJson) {
  ASSERT_EQ(clusterPresetNames().size(), 4u);
  for (const std::string &name : clusterPresetNames()) {
    std::optional<ClusterSpec> preset = clusterPreset(name);
    ASSERT_TRUE(preset) << name;
    std::string error;
    std::optional<ClusterSpec> parsed = parseCluster(preset->toJson(), error);
    ASSERT_TRUE(parsed) << name << ": " << error;
    EXPECT_EQ(parsed->name, name);
    EXPECT_EQ(parsed->devicesPerNode, 8);
    EXPECT_EQ(parsed->device.memoryBytes, preset->device.memoryBytes);
    EXPECT_EQ(parsed->peakFlops("bf16"), preset->peakFlops("bf16"));
    EXPECT_EQ(parsed->interNode.bandwidth, preset->interNode.bandwidth);
  }
  // Spec-sheet figures.
  EXPECT_EQ(clusterPreset("a100-80g")->peakFlops("bf16"), 312e12);
  EXPECT_EQ(clusterPreset("h100-sxm")->peakFlops("f16"), 989e12);
  EXPECT_EQ(clusterPreset("h200-sxm")->device.memoryBandwidth, 4.8e12);
  EXPECT_EQ(clusterPreset("b200")->intraNode.bandwidth, 900e9);
  EXPECT_FALSE(clusterPreset("v100"));
}

TEST(ClusterTest, RatesWithoutAnEntryFallBackToFp32) {
  llvm::json::Value json = clusterPreset("a100-80g")->toJson();
  json.getAsObject()
      ->getObject("device")
      ->getObject("peak_flops")
      ->erase("f16");
  std::string error;
  std::optional<ClusterSpec> cluster = parseCluster(json, error);
  ASSERT_TRUE(cluster) << error;
  EXPECT_EQ(cluster->peakFlops("f16"), 19.5e12);
}

TEST(ClusterTest, MissingAndNonPhysicalFieldsAreNamed) {
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              root.erase("devices_per_node");
            }),
            "field 'devices_per_node': expected a number > 0, found nothing");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              root["devices_per_node"] = 2.5;
            }),
            "field 'devices_per_node': expected a whole number of devices (1 "
            "to 1000000), found 2.5");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["memory_bandwidth"] = -1.0;
            }),
            "field 'device.memory_bandwidth': expected a number > 0, found -1");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["gemm_efficiency"] = 1.5;
            }),
            "field 'device.gemm_efficiency': expected a number > 0 and <= 1, "
            "found 1.5");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("inter_node"))["bandwidth"] = "fast";
            }),
            "field 'inter_node.bandwidth': expected a number, found a string");
  EXPECT_EQ(
      errorAfter([](llvm::json::Object &root) { root["intra_node"] = 3; }),
      "field 'intra_node': expected an object, found a number");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device")->getObject("peak_flops"))["fp8"] =
                  1e15;
            }),
            "field 'device.peak_flops.fp8' is not part of a cluster "
            "description (docs/Planner.md lists the fields)");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["attention_materializes_scores"] = 1;
            }),
            "field 'device.attention_materializes_scores': expected true or "
            "false, found a number");
  std::string error;
  EXPECT_FALSE(parseCluster(parse("[1]"), error));
  EXPECT_EQ(error, "expected a JSON object (a cluster description)");
}

TEST(ClusterTest, MeasuredOpEfficienciesRoundTripAndAreChecked) {
  // What trellis calibrate writes: op efficiencies (cached ops beat the
  // memory bandwidth) and its record, which the model does not read.
  llvm::json::Value json = clusterPreset("h100-sxm")->toJson();
  llvm::json::Object &device = *json.getAsObject()->getObject("device");
  device["op_efficiency"] =
      llvm::json::Object{{"gelu_tanh", 0.08}, {"slice", 3.5}};
  (*json.getAsObject())["calibration"] =
      llvm::json::Object{{"threads", 1}, {"anything", "goes"}};
  std::string error;
  std::optional<ClusterSpec> cluster = parseCluster(json, error);
  ASSERT_TRUE(cluster) << error;
  EXPECT_EQ(cluster->device.opEfficiency.at("gelu_tanh"), 0.08);
  EXPECT_EQ(cluster->device.opEfficiency.at("slice"), 3.5);
  std::optional<ClusterSpec> again = parseCluster(cluster->toJson(), error);
  ASSERT_TRUE(again) << error;
  EXPECT_EQ(again->device.opEfficiency, cluster->device.opEfficiency);

  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["op_efficiency"] =
                  llvm::json::Object{{"gelu_fast", 0.5}};
            }),
            "field 'device.op_efficiency.gelu_fast': not an op of the plan "
            "op table (trellis ops lists them)");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["op_efficiency"] =
                  llvm::json::Object{{"add", 0.0}};
            }),
            "field 'device.op_efficiency.add': expected a number > 0 and <= "
            "100, found 0");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["op_efficiency"] =
                  llvm::json::Object{{"matmul", 0.5}};
            }),
            "field 'device.op_efficiency.matmul': matmuls follow the GEMM "
            "curve (device.gemm_efficiency, device.gemm_half_size)");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["op_efficiency"] = 0.5;
            }),
            "field 'device.op_efficiency': expected an object, found a "
            "number");
}

TEST(ClusterTest, MeasuredLinkRatesAndOverlapRoundTripAndAreChecked) {
  llvm::json::Value json = clusterPreset("a100-80g")->toJson();
  (*json.getAsObject()->getObject("intra_node"))["relative_rate"] =
      llvm::json::Object{{"reduce_scatter", 0.3}, {"send", 2.0}};
  (*json.getAsObject()->getObject("device"))["communication_overlap"] = 0.25;
  std::string error;
  std::optional<ClusterSpec> cluster = parseCluster(json, error);
  ASSERT_TRUE(cluster) << error;
  EXPECT_EQ(cluster->intraNode.rateOf("reduce_scatter"), 300e9 * 0.8 * 0.3);
  EXPECT_EQ(cluster->intraNode.rateOf("all_reduce"), 300e9 * 0.8);
  EXPECT_EQ(cluster->device.communicationOverlap, 0.25);
  std::optional<ClusterSpec> again = parseCluster(cluster->toJson(), error);
  ASSERT_TRUE(again) << error;
  EXPECT_EQ(again->intraNode.relativeRate, cluster->intraNode.relativeRate);
  // Presets hide all of it.
  EXPECT_EQ(clusterPreset("h100-sxm")->device.communicationOverlap, 1.0);

  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("intra_node"))["relative_rate"] =
                  llvm::json::Object{{"broadcast", 1.0}};
            }),
            "field 'intra_node.relative_rate.broadcast' is not part of a "
            "cluster description (docs/Planner.md lists the fields)");
  EXPECT_EQ(errorAfter([](llvm::json::Object &root) {
              (*root.getObject("device"))["communication_overlap"] = 1.5;
            }),
            "field 'device.communication_overlap': expected a number >= 0 "
            "and <= 1, found 1.5");
}

TEST(ClusterTest, LoadNamesTheFileOrThePresets) {
  std::string error;
  EXPECT_FALSE(loadCluster("/nonexistent/cluster.json", error));
  EXPECT_NE(error.find("is neither a cluster preset (a100-80g, h100-sxm, "
                       "h200-sxm, b200) nor a readable file"),
            std::string::npos)
      << error;
  EXPECT_TRUE(loadCluster("b200", error));
}

} // namespace
