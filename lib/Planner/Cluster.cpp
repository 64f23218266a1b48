//===- Cluster.cpp - Cluster descriptions and their presets ---------------===//
//
// The presets' figures are the vendors' spec sheets: dense tensor-core
// peaks (no sparsity), HBM size and bandwidth, NVLink bandwidth per
// direction (half the bidirectional figure), and one network card per GPU.
// The efficiencies are the same for every preset: what tuned kernels and
// NCCL reach on these parts (docs/Planner.md says where each comes from).
//
//===----------------------------------------------------------------------===//

#include "trellis/Planner/Cluster.h"

#include "trellis/Common/FileKind.h"
#include "trellis/Common/JsonShape.h"
#include "trellis/Common/OpContract.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>

namespace trellis::planner {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// The largest share of its roofline an op may be measured at.
constexpr double kMaxOpEfficiency = 100;

/// What every preset assumes of kernels and links.
ClusterSpec commonPreset() {
  ClusterSpec cluster;
  cluster.devicesPerNode = 8;
  cluster.device.usableMemoryFraction = 0.92;
  cluster.device.memoryEfficiency = 0.8;
  cluster.device.gemmEfficiency = 0.8;
  cluster.device.gemmHalfSize = 48;
  cluster.device.attentionEfficiency = 0.5;
  cluster.device.kernelOverhead = 4e-6;
  cluster.intraNode = {0, 5e-6, 0.8};
  cluster.interNode = {0, 1e-5, 0.85};
  return cluster;
}

ClusterSpec preset(const char *name, const char *device, double memoryBytes,
                   double memoryBandwidth, double f32, double bf16,
                   double nvlink, double network) {
  ClusterSpec cluster = commonPreset();
  cluster.name = name;
  cluster.device.name = device;
  cluster.device.memoryBytes = memoryBytes;
  cluster.device.memoryBandwidth = memoryBandwidth;
  cluster.device.peakFlops = {{"f32", f32}, {"bf16", bf16}, {"f16", bf16}};
  cluster.intraNode.bandwidth = nvlink;
  cluster.interNode.bandwidth = network;
  return cluster;
}

std::vector<ClusterSpec> presets() {
  return {
      // A100 SXM4 80GB: 312 TFLOP/s bf16, 19.5 fp32, 2039 GB/s HBM2e;
      // NVLink 3 600 GB/s; HDR InfiniBand 200 Gb/s per GPU (DGX A100).
      preset("a100-80g", "NVIDIA A100-SXM4-80GB", 80 * kGiB, 2.039e12, 19.5e12,
             312e12, 300e9, 25e9),
      // H100 SXM5 80GB: 989 TFLOP/s bf16, 67 fp32, 3.35 TB/s HBM3;
      // NVLink 4 900 GB/s; NDR 400 Gb/s per GPU (DGX H100).
      preset("h100-sxm", "NVIDIA H100 80GB HBM3", 80 * kGiB, 3.35e12, 67e12,
             989e12, 450e9, 50e9),
      // H200 SXM 141GB: the H100's compute, 4.8 TB/s HBM3e; NVLink 4;
      // NDR 400 Gb/s per GPU (DGX H200).
      preset("h200-sxm", "NVIDIA H200", 141e9, 4.8e12, 67e12, 989e12, 450e9,
             50e9),
      // B200 180GB: 2.25 PFLOP/s bf16 dense, 75 TFLOP/s fp32, 8 TB/s
      // HBM3e; NVLink 5 1.8 TB/s; 400 Gb/s per GPU (DGX B200).
      preset("b200", "NVIDIA B200", 180e9, 8e12, 75e12, 2.25e15, 900e9, 50e9),
  };
}

/// `2.5`, `-1`, `1e+12`: a number as a user would write it.
std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

/// Reads the fields of one JSON object, recording the first error.
class FieldReader {
public:
  FieldReader(const llvm::json::Object *object, std::string path,
              std::string &error)
      : object_(object), path_(std::move(path)), error_(error) {}

  /// A number > 0 (`positive`) or >= 0, at most `max`.
  void number(const char *key, double &out, bool positive = true,
              double max = INFINITY, bool required = true) {
    if (!error_.empty())
      return;
    const llvm::json::Value *value = object_->get(key);
    if (!value) {
      if (required)
        fail(key, positive ? "a number > 0" : "a number >= 0", "nothing");
      return;
    }
    std::optional<double> number = value->getAsNumber();
    if (!number) {
      fail(key, "a number", describe(*value));
      return;
    }
    if (!std::isfinite(*number) || (positive ? *number <= 0 : *number < 0) ||
        *number > max) {
      std::string expected =
          positive ? "a number > 0" : std::string("a number >= 0");
      if (std::isfinite(max))
        expected += " and <= " + formatNumber(max);
      fail(key, expected, formatNumber(*number));
      return;
    }
    out = *number;
  }
  void integer(const char *key, int64_t &out) {
    double value = 0;
    number(key, value);
    if (!error_.empty())
      return;
    if (value != std::floor(value) || value > 1e6) {
      fail(key, "a whole number of devices (1 to 1000000)",
           formatNumber(value));
      return;
    }
    out = static_cast<int64_t>(value);
  }
  /// An optional boolean.
  void flag(const char *key, bool &out) {
    if (!error_.empty())
      return;
    const llvm::json::Value *value = object_->get(key);
    if (!value)
      return;
    std::optional<bool> flag = value->getAsBoolean();
    if (!flag) {
      fail(key, "true or false", describe(*value));
      return;
    }
    out = *flag;
  }
  void text(const char *key, std::string &out, bool required) {
    if (!error_.empty())
      return;
    const llvm::json::Value *value = object_->get(key);
    if (!value) {
      if (required)
        fail(key, "a string", "nothing");
      return;
    }
    std::optional<llvm::StringRef> string = value->getAsString();
    if (!string) {
      fail(key, "a string", describe(*value));
      return;
    }
    out = string->str();
  }
  /// A nested object, or null after recording an error.
  const llvm::json::Object *object(const char *key) {
    if (!error_.empty())
      return nullptr;
    const llvm::json::Value *value = object_->get(key);
    const llvm::json::Object *nested = value ? value->getAsObject() : nullptr;
    if (!nested)
      fail(key, "an object", value ? describe(*value) : "nothing");
    return nested;
  }
  std::string path(const char *key) const { return path_ + key; }

  /// Keys the schema does not have are errors (a misspelt field would
  /// otherwise fall back to nothing).
  void known(std::initializer_list<const char *> keys) {
    if (!error_.empty())
      return;
    for (const auto &entry : *object_) {
      bool found = false;
      for (const char *key : keys)
        found |= entry.first == key;
      if (!found) {
        error_ = llvm::formatv("field '{0}{1}' is not part of a cluster "
                               "description (docs/Planner.md lists the "
                               "fields)",
                               path_, entry.first.str())
                     .str();
        return;
      }
    }
  }

private:
  static std::string describe(const llvm::json::Value &value) {
    switch (value.kind()) {
    case llvm::json::Value::Null:
      return "null";
    case llvm::json::Value::Boolean:
      return "a boolean";
    case llvm::json::Value::Number:
      return "a number";
    case llvm::json::Value::String:
      return "a string";
    case llvm::json::Value::Array:
      return "an array";
    case llvm::json::Value::Object:
      return "an object";
    }
    return "a value";
  }
  void fail(const char *key, llvm::StringRef expected, llvm::StringRef found) {
    error_ = llvm::formatv("field '{0}{1}': expected {2}, found {3}", path_,
                           key, expected, found)
                 .str();
  }

  const llvm::json::Object *object_;
  std::string path_;
  std::string &error_;
};

void readLink(FieldReader &parent, const char *key, LinkSpec &link,
              std::string &error) {
  const llvm::json::Object *object = parent.object(key);
  if (!object)
    return;
  FieldReader reader(object, parent.path(key) + ".", error);
  reader.known({"bandwidth", "latency_s", "efficiency", "relative_rate"});
  reader.number("bandwidth", link.bandwidth);
  reader.number("latency_s", link.latency, /*positive=*/false, 1.0);
  reader.number("efficiency", link.efficiency, true, 1.0);
  if (error.empty() && object->get("relative_rate"))
    if (const llvm::json::Object *rates = reader.object("relative_rate")) {
      FieldReader kinds(rates, parent.path(key) + ".relative_rate.", error);
      kinds.known({"all_gather", "reduce_scatter", "all_to_all", "send"});
      for (const auto &entry : *rates) {
        std::string kind = entry.first.str();
        double rate = 0;
        kinds.number(kind.c_str(), rate, true, 100.0);
        link.relativeRate[kind] = rate;
      }
    }
}

llvm::json::Value linkJson(const LinkSpec &link) {
  llvm::json::Object json{{"bandwidth", link.bandwidth},
                          {"latency_s", link.latency},
                          {"efficiency", link.efficiency}};
  if (!link.relativeRate.empty()) {
    llvm::json::Object rates;
    for (const auto &[kind, rate] : link.relativeRate)
      rates[kind] = rate;
    json["relative_rate"] = std::move(rates);
  }
  return json;
}

} // namespace

double ClusterSpec::peakFlops(const std::string &dtype) const {
  auto found = device.peakFlops.find(dtype);
  if (found != device.peakFlops.end())
    return found->second;
  return device.peakFlops.at("f32");
}

llvm::json::Value ClusterSpec::toJson() const {
  llvm::json::Object peaks;
  for (const auto &[dtype, rate] : device.peakFlops)
    peaks[dtype] = rate;
  llvm::json::Object json{
      {"name", name},
      {"devices_per_node", devicesPerNode},
      {"device",
       llvm::json::Object{
           {"name", device.name},
           {"memory_bytes", device.memoryBytes},
           {"usable_memory_fraction", device.usableMemoryFraction},
           {"memory_bandwidth", device.memoryBandwidth},
           {"memory_efficiency", device.memoryEfficiency},
           {"peak_flops", std::move(peaks)},
           {"gemm_efficiency", device.gemmEfficiency},
           {"gemm_half_size", device.gemmHalfSize},
           {"attention_efficiency", device.attentionEfficiency},
           {"attention_materializes_scores",
            device.attentionMaterializesScores},
           {"kernel_overhead_s", device.kernelOverhead},
           {"communication_overlap", device.communicationOverlap},
       }},
      {"intra_node", linkJson(intraNode)},
      {"inter_node", linkJson(interNode)},
  };
  if (!device.opEfficiency.empty()) {
    llvm::json::Object ops;
    for (const auto &[op, efficiency] : device.opEfficiency)
      ops[op] = efficiency;
    (*json.getObject("device"))["op_efficiency"] = std::move(ops);
  }
  return json;
}

std::vector<std::string> clusterPresetNames() {
  std::vector<std::string> names;
  for (const ClusterSpec &cluster : presets())
    names.push_back(cluster.name);
  return names;
}

std::optional<ClusterSpec> clusterPreset(const std::string &name) {
  for (ClusterSpec &cluster : presets())
    if (cluster.name == name)
      return std::move(cluster);
  return std::nullopt;
}

std::optional<ClusterSpec> parseCluster(const llvm::json::Value &json,
                                        std::string &error) {
  error.clear();
  const llvm::json::Object *root = json.getAsObject();
  if (!root) {
    error = "expected a JSON object (a cluster description)";
    return std::nullopt;
  }
  ClusterSpec cluster;
  FieldReader top(root, "", error);
  top.known({"name", "devices_per_node", "device", "intra_node", "inter_node",
             "calibration"});
  top.text("name", cluster.name, /*required=*/false);
  top.integer("devices_per_node", cluster.devicesPerNode);
  if (const llvm::json::Object *device = top.object("device")) {
    DeviceSpec &spec = cluster.device;
    FieldReader reader(device, "device.", error);
    reader.known({"name", "memory_bytes", "usable_memory_fraction",
                  "memory_bandwidth", "memory_efficiency", "peak_flops",
                  "gemm_efficiency", "gemm_half_size", "attention_efficiency",
                  "attention_materializes_scores", "kernel_overhead_s",
                  "op_efficiency", "communication_overlap"});
    reader.text("name", spec.name, /*required=*/false);
    reader.number("memory_bytes", spec.memoryBytes);
    reader.number("usable_memory_fraction", spec.usableMemoryFraction, true,
                  1.0, /*required=*/false);
    reader.number("memory_bandwidth", spec.memoryBandwidth);
    reader.number("memory_efficiency", spec.memoryEfficiency, true, 1.0);
    reader.number("gemm_efficiency", spec.gemmEfficiency, true, 1.0);
    reader.number("gemm_half_size", spec.gemmHalfSize, /*positive=*/false);
    reader.number("attention_efficiency", spec.attentionEfficiency, true, 1.0);
    reader.number("kernel_overhead_s", spec.kernelOverhead,
                  /*positive=*/false, 1.0);
    reader.number("communication_overlap", spec.communicationOverlap,
                  /*positive=*/false, 1.0, /*required=*/false);
    reader.flag("attention_materializes_scores",
                spec.attentionMaterializesScores);
    if (const llvm::json::Object *peaks = reader.object("peak_flops")) {
      FieldReader rates(peaks, "device.peak_flops.", error);
      rates.known({"f32", "bf16", "f16"});
      for (const char *dtype : {"f32", "bf16", "f16"}) {
        double rate = 0;
        rates.number(dtype, rate, true, INFINITY,
                     /*required=*/std::string(dtype) == "f32");
        if (rate > 0)
          spec.peakFlops[dtype] = rate;
      }
    }
    if (device->get("op_efficiency"))
      if (const llvm::json::Object *ops = reader.object("op_efficiency")) {
        // Kernels whose data stays in caches may beat the memory
        // bandwidth; a hundredfold would be a measuring error.
        FieldReader shares(ops, "device.op_efficiency.", error);
        for (const auto &entry : *ops) {
          std::string op = entry.first.str();
          if (!findOpContract(op) && error.empty()) {
            error = "field 'device.op_efficiency." + op +
                    "': not an op of the plan op table (trellis ops "
                    "lists them)";
            break;
          }
          if ((op == "matmul" || op == "matmul_accumulate") && error.empty()) {
            error = "field 'device.op_efficiency." + op +
                    "': matmuls follow the GEMM curve "
                    "(device.gemm_efficiency, device.gemm_half_size)";
            break;
          }
          double share = 0;
          shares.number(op.c_str(), share, true, kMaxOpEfficiency);
          spec.opEfficiency[op] = share;
        }
      }
  }
  readLink(top, "intra_node", cluster.intraNode, error);
  readLink(top, "inter_node", cluster.interNode, error);
  if (!error.empty())
    return std::nullopt;
  return cluster;
}

std::optional<ClusterSpec> loadCluster(const std::string &nameOrPath,
                                       std::string &error) {
  if (std::optional<ClusterSpec> found = clusterPreset(nameOrPath))
    return found;
  std::string contents;
  if (std::string why =
          readRegularFile(nameOrPath, contents, kMaxClusterFileBytes);
      !why.empty()) {
    std::string names;
    for (const std::string &name : clusterPresetNames())
      names += (names.empty() ? "" : ", ") + name;
    error = llvm::formatv("'{0}' is neither a cluster preset ({1}) nor a "
                          "readable file: it {2}",
                          nameOrPath, names, why)
                .str();
    return std::nullopt;
  }
  llvm::StringRef text = contents;
  if (std::string shape = checkJsonShape(text, 16); !shape.empty()) {
    error = nameOrPath + ": " + shape;
    return std::nullopt;
  }
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json) {
    error = nameOrPath + ": " + llvm::toString(json.takeError());
    return std::nullopt;
  }
  std::optional<ClusterSpec> cluster = parseCluster(*json, error);
  if (!cluster)
    error = nameOrPath + ": " + error;
  else if (cluster->name.empty())
    cluster->name = nameOrPath;
  return cluster;
}

} // namespace trellis::planner
