//===- Cluster.h - The machines a plan runs on ------------------*- C++ -*-===//
//
// A cluster description for the planner's time model: the devices (peak
// dense FLOP/s per element type, memory and its bandwidth, how close real
// kernels come to the peaks) and the two link tiers between them (inside a
// node: NVLink or NVSwitch; across nodes: each device's share of the
// network). docs/Planner.md documents the JSON schema; the built-in presets
// hold public spec-sheet figures.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PLANNER_CLUSTER_H
#define TRELLIS_PLANNER_CLUSTER_H

#include "llvm/Support/JSON.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trellis::planner {

/// A link tier: per-device bandwidth in one direction (bytes/s), the
/// latency of one algorithm step (s), and the share of the bandwidth
/// collectives reach.
struct LinkSpec {
  double bandwidth = 0;
  double latency = 0;
  double efficiency = 1;
  /// Measured (`trellis calibrate`): a collective kind's bandwidth
  /// relative to the link's (`all_gather`, `reduce_scatter`,
  /// `all_to_all`, `send` for point-to-point transfers; absent: 1).
  /// Libraries implement kinds unequally (Gloo's reduce-scatter is an
  /// all-to-all and a local sum).
  std::map<std::string, double> relativeRate;

  double rateOf(const std::string &kind) const {
    auto found = relativeRate.find(kind);
    return bandwidth * efficiency *
           (found == relativeRate.end() ? 1.0 : found->second);
  }
};

struct DeviceSpec {
  std::string name;
  /// Memory per device and the share of it a plan may use (the rest goes
  /// to the runtime's context, communication buffers, fragmentation).
  double memoryBytes = 0;
  double usableMemoryFraction = 1;
  /// Memory bandwidth (bytes/s) and the share memory-bound kernels reach.
  double memoryBandwidth = 0;
  double memoryEfficiency = 1;
  /// Dense peak FLOP/s by element type (`f32`, `bf16`, `f16`): matmuls in
  /// f32 run at the f32 rate (no TF32).
  std::map<std::string, double> peakFlops;
  /// The share of the peak a large matmul reaches, and the size at which one
  /// small dimension alone halves it: a [m, k] x [k, n] piece reaches
  /// gemmEfficiency * m/(m+h) * n/(n+h) * k/(k+h) of the peak, h the
  /// half size.
  double gemmEfficiency = 1;
  double gemmHalfSize = 0;
  /// The share of the peak fused attention reaches (a causal one skips the
  /// masked half of its products).
  double attentionEfficiency = 1;
  /// Attention as older stacks run it (Megatron-LM before FlashAttention):
  /// the scores are written to memory, so attention costs two batched
  /// GEMMs at the GEMM efficiency plus softmax, mask and dropout passes
  /// over every score (13 bytes each forward, 26 backward, in 16 bits), and
  /// a causal mask skips nothing.
  bool attentionMaterializesScores = false;
  /// Fixed time per kernel launch (s).
  double kernelOverhead = 0;
  /// The share of communication that compute running beside it can hide
  /// (1: separate engines, as GPUs' copy engines and NICs; a CPU's
  /// communication thread shares the cores its kernels use).
  double communicationOverlap = 1;
  /// Measured kernels (`trellis calibrate`), by op-table row: the share of
  /// its roofline an op reaches, where it differs from the defaults above.
  /// An op's roofline is its bytes over `memoryBandwidth` or its FLOPs over
  /// the f32 peak, whichever is longer (attention: its FLOPs, half for a
  /// causal mask, over its dtype's peak). It replaces `memoryEfficiency`
  /// (`attentionEfficiency` for attention) for that op; it may exceed 1
  /// where an op's data stays in caches faster than `memoryBandwidth`.
  /// Matmuls keep the GEMM curve (no entry).
  std::map<std::string, double> opEfficiency;
};

struct ClusterSpec {
  std::string name;
  int64_t devicesPerNode = 1;
  DeviceSpec device;
  LinkSpec intraNode, interNode;

  /// The usable memory of one device, in bytes.
  double usableMemory() const {
    return device.memoryBytes * device.usableMemoryFraction;
  }
  /// The peak of `dtype`, or of f32 when the device names no rate for it.
  double peakFlops(const std::string &dtype) const;

  llvm::json::Value toJson() const;
};

/// The built-in presets' names (`a100-80g`, `h100-sxm`, `h200-sxm`, `b200`).
std::vector<std::string> clusterPresetNames();

/// A preset by name, or nullopt.
std::optional<ClusterSpec> clusterPreset(const std::string &name);

/// Parses a cluster file's JSON. On a missing field, a wrong type or a
/// value that is not physical (negative, zero where a rate is needed, an
/// efficiency above 1) returns nullopt with `error` naming the field, what
/// it expects and what it found. A top-level `calibration` object (what
/// `trellis calibrate` measured) is kept out of the model: it is a record.
std::optional<ClusterSpec> parseCluster(const llvm::json::Value &json,
                                        std::string &error);

/// A preset's name or a cluster file's path: the preset when the name is
/// one, else the file read and parsed (errors name the file).
std::optional<ClusterSpec> loadCluster(const std::string &nameOrPath,
                                       std::string &error);

} // namespace trellis::planner

#endif // TRELLIS_PLANNER_CLUSTER_H
