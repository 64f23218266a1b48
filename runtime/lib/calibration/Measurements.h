//===- Measurements.h - What trellis calibrate measures ---------*- C++ -*-===//
//
// The pieces of Calibration.cpp: kernels on one device, links among the
// node's ranks. Each returns its figures and the points they were fitted
// to (for the file's `calibration` record).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_LIB_CALIBRATION_MEASUREMENTS_H
#define TRELLIS_RUNTIME_LIB_CALIBRATION_MEASUREMENTS_H

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Calibration.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>

namespace trellis::runtime::calibration {

/// Seconds one call of `run` takes: warmed up once, then the median of
/// `trials` timings of enough calls to last `minSeconds` (at least one);
/// `finish` (a device's synchronize) ends each timing. Fails with the
/// first failure of `run` or `finish`.
StatusOr<double> timeCalls(const std::function<Status()> &run,
                           const std::function<Status()> &finish,
                           double minSeconds, int trials);

/// The GEMM curve: the rate a [m, k] x [k, n] product reaches is
/// `peak * m/(m+h) * n/(n+h) * k/(k+h)`.
struct GemmFit {
  double peak = 0;
  double halfSize = 0;
  /// The fit's root-mean-square error of log rates, as a factor (1.1:
  /// rates off by about 10%).
  double errorFactor = 1;
  /// The measured points: {m, k, n, FLOP/s}.
  nlohmann::json points = nlohmann::json::array();
};

struct KernelFigures {
  /// By element type ("f32", "bf16", "f16"): the element types the
  /// device's matmul runs.
  std::map<std::string, GemmFit> gemm;
  double memoryBandwidth = 0;
  double kernelOverhead = 0;
  /// Op-table row -> share of its roofline (Cluster.h's opEfficiency).
  std::map<std::string, double> opEfficiency;
  /// Attention's forward share of its dtype's peak, where the plans have
  /// one (else 0).
  double attentionEfficiency = 0;
  nlohmann::json record = nlohmann::json::object();
};

/// Measures matmuls, bandwidth, launches and every distinct compute
/// instruction of `options.plans` on `device`; `progress`: says what it
/// measures on standard error.
StatusOr<KernelFigures> measureKernels(Device &device,
                                       const CalibrationOptions &options,
                                       bool progress);

struct LinkFigures {
  /// Bytes/s one way per rank, and seconds per algorithm step.
  double bandwidth = 0;
  double latency = 0;
  /// Each other kind's bandwidth relative to the fitted link's (the
  /// cluster file's `relative_rate`).
  std::map<std::string, double> relativeRate;
  /// The share of communication compute beside it hides (the cluster
  /// file's `device.communication_overlap`).
  double overlap = 1;
  nlohmann::json record = nlohmann::json::object();
};

/// Rank `rank` of `options.ranks` processes: connects through the
/// directory store `storeDir` and times all-reduces and sends of many
/// sizes. Every rank returns the figures (rank 0's are the ones kept).
StatusOr<LinkFigures> measureLinks(const Backend &backend, int64_t rank,
                                   const std::string &storeDir,
                                   const CalibrationOptions &options);

} // namespace trellis::runtime::calibration

#endif // TRELLIS_RUNTIME_LIB_CALIBRATION_MEASUREMENTS_H
