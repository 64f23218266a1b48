//===- LinkMeasurements.cpp - Collectives among the node's ranks ----------===//
//
// The ranks connect as a plan's do (the backend's communicator, a
// directory store) and time all-reduces over all of them and ping-pongs
// between ranks 0 and 1, at sizes from a few KiB to tens of MiB. Every
// rank makes the same calls in the same order (the repetitions depend on
// the size only), so no rank waits on a call another never makes. The
// link's bandwidth and latency are fitted to the all-reduces with the
// planner's formula (StepTime.cpp): an all-reduce over n ranks moves
// 2 (n-1)/n of its bytes and pays 2 ceil(log2 n) latencies. A transfer
// (its bytes, one latency) is recorded beside its prediction: Gloo's
// all-reduces pay far more per call than its sends on loopback, and one
// link cannot fit both.
//
//===----------------------------------------------------------------------===//

#include "Measurements.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace trellis::runtime::calibration {

namespace {

struct LinkPoint {
  std::string kind;
  double bytes = 0;
  /// The fit's coefficients: latencies paid and bytes on the wire.
  double latencies = 0, wireBytes = 0;
  double seconds = 0;
};

/// Least squares of `seconds = latencies * latency + wireBytes / bandwidth`
/// relative to each point's time (small and large transfers count alike).
void fitLink(const std::vector<LinkPoint> &points, LinkFigures &figures) {
  double aa = 0, ab = 0, bb = 0, ay = 0, by = 0;
  for (const LinkPoint &point : points) {
    double a = point.latencies / point.seconds;
    double b = point.wireBytes / point.seconds;
    aa += a * a;
    ab += a * b;
    bb += b * b;
    ay += a;
    by += b;
  }
  double determinant = aa * bb - ab * ab;
  double latency = (ay * bb - by * ab) / determinant;
  double perByte = (aa * by - ab * ay) / determinant;
  // Noise can make one coefficient negative: fit the other alone.
  if (!(latency >= 0) || !std::isfinite(latency)) {
    latency = 0;
    perByte = by / bb;
  } else if (!(perByte > 0) || !std::isfinite(perByte)) {
    const LinkPoint &largest = points.back();
    perByte = largest.seconds / largest.wireBytes;
    latency = 0;
  }
  figures.latency = latency;
  figures.bandwidth = 1.0 / perByte;
  double squares = 0;
  for (const LinkPoint &point : points) {
    double predicted = point.latencies * latency + point.wireBytes * perByte;
    double error = std::log(predicted / point.seconds);
    squares += error * error;
  }
  figures.record["rms_error_factor"] =
      std::exp(std::sqrt(squares / static_cast<double>(points.size())));
}

} // namespace

StatusOr<LinkFigures> measureLinks(const Backend &backend, int64_t rank,
                                   const std::string &storeDir,
                                   const CalibrationOptions &options) {
  StatusOr<std::unique_ptr<Device>> device = backend.createDevice(
      {options.threads, rank, options.ranks, /*maxMemoryBytes=*/0});
  if (!device.ok())
    return device.status();
  MeshError meshError;
  std::optional<Mesh> mesh =
      Mesh::create({{"dp", options.ranks, AxisRole::Data}}, &meshError);
  if (!mesh)
    return Status::error("the calibration mesh: " + meshError.message);
  AxisList all{0};
  RendezvousOptions rendezvous;
  rendezvous.storeDir = storeDir;
  rendezvous.timeout = options.timeout;
  StatusOr<std::unique_ptr<Communicator>> comm =
      backend.connect(**device, *mesh, rank, {all}, rendezvous);
  if (!comm.ok())
    return comm.status().withContext("connecting the calibration ranks");

  std::vector<int64_t> sizes;
  for (int64_t bytes = 4 << 10; bytes <= (options.quick ? 1 << 20 : 64 << 20);
       bytes *= options.quick ? 16 : 4)
    sizes.push_back(bytes);
  int64_t largest = sizes.back();
  StatusOr<std::unique_ptr<DeviceAllocation>> memory =
      (*device)->allocate(largest);
  if (!memory.ok())
    return memory.status();
  void *data = (*memory)->data();
  double n = static_cast<double>(options.ranks);
  double steps = std::ceil(std::log2(std::max(n, 2.0)));
  std::vector<LinkPoint> points;
  using Clock = std::chrono::steady_clock;
  for (int64_t bytes : sizes) {
    int64_t count = bytes / 4;
    // Repetitions from the size alone: the same on every rank.
    int64_t calls =
        std::clamp<int64_t>((options.quick ? 1 << 20 : 16 << 20) / bytes, 2,
                            options.quick ? 8 : 64);
    std::vector<double> reduceTimes, pingTimes;
    for (int trial = 0; trial < (options.quick ? 1 : 3); ++trial) {
      TRELLIS_RETURN_IF_ERROR((*comm)->barrier());
      Clock::time_point start = Clock::now();
      for (int64_t call = 0; call < calls; ++call)
        TRELLIS_RETURN_IF_ERROR(
            (*comm)->allReduce(all, data, count, DType::F32, ReduceKind::Sum));
      TRELLIS_RETURN_IF_ERROR((*device)->synchronize());
      reduceTimes.push_back(
          std::chrono::duration<double>(Clock::now() - start).count() /
          static_cast<double>(calls));
      // Ping-pong between ranks 0 and 1: one way is half a round trip.
      TRELLIS_RETURN_IF_ERROR((*comm)->barrier());
      start = Clock::now();
      for (int64_t call = 0; call < calls && rank < 2; ++call) {
        if (rank == 0) {
          TRELLIS_RETURN_IF_ERROR(
              (*comm)->send(all, data, count, DType::F32, 1, 0));
          TRELLIS_RETURN_IF_ERROR(
              (*comm)->recv(all, data, count, DType::F32, 1, 1));
        } else {
          TRELLIS_RETURN_IF_ERROR(
              (*comm)->recv(all, data, count, DType::F32, 0, 0));
          TRELLIS_RETURN_IF_ERROR(
              (*comm)->send(all, data, count, DType::F32, 0, 1));
        }
      }
      TRELLIS_RETURN_IF_ERROR((*device)->synchronize());
      pingTimes.push_back(
          std::chrono::duration<double>(Clock::now() - start).count() /
          static_cast<double>(2 * calls));
    }
    auto median = [](std::vector<double> times) {
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    double size = static_cast<double>(bytes);
    points.push_back({"all_reduce", size, 2 * steps, 2 * (n - 1) / n * size,
                      median(reduceTimes)});
    points.push_back({"send", size, 1, size, median(pingTimes)});
  }
  TRELLIS_RETURN_IF_ERROR((*comm)->barrier());

  // The fit follows the all-reduces (the collectives plans make most:
  // gradients, tensor parallelism); the transfers' points are recorded
  // with what it predicts for them.
  std::vector<LinkPoint> reductions;
  for (const LinkPoint &point : points)
    if (point.kind == "all_reduce")
      reductions.push_back(point);
  LinkFigures figures;
  fitLink(reductions, figures);
  nlohmann::json measured = nlohmann::json::array();
  for (const LinkPoint &point : points)
    measured.push_back(
        {{"kind", point.kind},
         {"bytes", point.bytes},
         {"seconds", point.seconds},
         {"predicted_s", point.latencies * figures.latency +
                             point.wireBytes / figures.bandwidth}});
  figures.record["ranks"] = options.ranks;
  figures.record["points"] = std::move(measured);
  return figures;
}

} // namespace trellis::runtime::calibration
