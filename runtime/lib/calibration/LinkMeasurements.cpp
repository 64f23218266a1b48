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
// link cannot fit both. Each other kind (and the sends) then gets its
// rate relative to the link, and the overlap of an all-reduce with
// matmuls beside it is measured (Measurements.h).
//
//===----------------------------------------------------------------------===//

#include "Measurements.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

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

struct KindPoint {
  std::string kind;
  /// The whole tensor: all-gather's result, reduce-scatter's operand,
  /// all-to-all's operand.
  double bytes = 0;
  double seconds = 0;
};

/// Seconds one `kind` instruction over a `bytes` f32 tensor takes through
/// the device's collective lowering (every rank calls it alike).
StatusOr<double> timeCollective(Device &device, Communicator &comm,
                                const std::string &kind, int64_t bytes,
                                int64_t ranks, bool quick) {
  int64_t whole = bytes / 4 / ranks * ranks;
  int64_t piece = whole / ranks;
  Instruction instruction;
  instruction.op = kind;
  instruction.inputs = {0};
  instruction.outputs = {1};
  BufferDesc input{{kind == "all_gather" ? piece : whole}, DType::F32};
  BufferDesc output{{kind == "reduce_scatter" ? piece : whole}, DType::F32};
  if (kind == "all_to_all") {
    instruction.attrs["split_dim"] = AttrValue::ofInt(0);
    instruction.attrs["concat_dim"] = AttrValue::ofInt(0);
  } else {
    instruction.attrs["dim"] = AttrValue::ofInt(0);
  }
  if (kind == "reduce_scatter")
    instruction.attrs["kind"] = AttrValue::ofString("sum");
  instruction.resolve();
  std::vector<std::unique_ptr<DeviceAllocation>> memory;
  std::vector<Tensor> tensors;
  for (const BufferDesc &desc : {input, output}) {
    StatusOr<std::unique_ptr<DeviceAllocation>> allocation =
        device.allocate(desc.numElements() * 4);
    if (!allocation.ok())
      return allocation.status();
    tensors.emplace_back(desc, (*allocation)->data());
    memory.push_back(std::move(*allocation));
  }
  AxisList all{0};
  KernelArgs args{instruction, BufferTable(tensors), all, &comm};
  int calls = quick ? 2 : 8;
  std::vector<double> times;
  using Clock = std::chrono::steady_clock;
  for (int trial = 0; trial < (quick ? 1 : 3); ++trial) {
    TRELLIS_RETURN_IF_ERROR(comm.barrier());
    Clock::time_point start = Clock::now();
    for (int call = 0; call < calls; ++call)
      TRELLIS_RETURN_IF_ERROR(device.runCollective(args));
    TRELLIS_RETURN_IF_ERROR(device.synchronize());
    times.push_back(
        std::chrono::duration<double>(Clock::now() - start).count() / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// The share of an all-reduce that matmuls running beside it hide: each
/// alone, then both at once (the all-reduce on the device's
/// communication stream, as a plan's reductions run), from
/// (alone + alone - together) / the shorter. Every rank runs it alike.
StatusOr<double> measureOverlap(Device &device, Communicator &comm,
                                int64_t bytes, int calls) {
  StatusOr<std::unique_ptr<DeviceAllocation>> buffer = device.allocate(bytes);
  if (!buffer.ok())
    return buffer.status();
  constexpr int64_t kSize = 512;
  std::vector<std::unique_ptr<DeviceAllocation>> memory;
  std::vector<Tensor> tensors;
  for (int i = 0; i < 3; ++i) {
    StatusOr<std::unique_ptr<DeviceAllocation>> allocation =
        device.allocate(kSize * kSize * 4);
    if (!allocation.ok())
      return allocation.status();
    tensors.emplace_back(BufferDesc{{kSize, kSize}, DType::F32},
                         (*allocation)->data());
    memory.push_back(std::move(*allocation));
  }
  Instruction matmul;
  matmul.op = "matmul";
  matmul.inputs = {0, 1};
  matmul.outputs = {2};
  matmul.resolve();
  AxisList none, all{0};
  KernelArgs args{matmul, BufferTable(tensors), none};
  void *data = (*buffer)->data();
  auto reduce = [&]() -> Status {
    for (int call = 0; call < calls; ++call)
      TRELLIS_RETURN_IF_ERROR(
          comm.allReduce(all, data, bytes / 4, DType::F32, ReduceKind::Sum));
    return Status::success();
  };
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::vector<double> overlaps;
  for (int trial = 0; trial < 3; ++trial) {
    TRELLIS_RETURN_IF_ERROR(comm.barrier());
    Clock::time_point start = Clock::now();
    TRELLIS_RETURN_IF_ERROR(
        device.waitCommunication(device.enqueueCommunication(reduce)));
    double communication = since(start);
    // As many products as last about as long.
    start = Clock::now();
    TRELLIS_RETURN_IF_ERROR(device.launch(args));
    TRELLIS_RETURN_IF_ERROR(device.synchronize());
    int64_t products = std::clamp<int64_t>(
        static_cast<int64_t>(communication / std::max(since(start), 1e-6)), 1,
        10000);
    start = Clock::now();
    for (int64_t i = 0; i < products; ++i)
      TRELLIS_RETURN_IF_ERROR(device.launch(args));
    TRELLIS_RETURN_IF_ERROR(device.synchronize());
    double compute = since(start);
    TRELLIS_RETURN_IF_ERROR(comm.barrier());
    start = Clock::now();
    int64_t event = device.enqueueCommunication(reduce);
    for (int64_t i = 0; i < products; ++i)
      TRELLIS_RETURN_IF_ERROR(device.launch(args));
    TRELLIS_RETURN_IF_ERROR(device.waitCommunication(event));
    TRELLIS_RETURN_IF_ERROR(device.synchronize());
    double together = since(start);
    overlaps.push_back(std::clamp((communication + compute - together) /
                                      std::min(communication, compute),
                                  0.0, 1.0));
  }
  std::sort(overlaps.begin(), overlaps.end());
  return overlaps[overlaps.size() / 2];
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
    return Status::error(meshError.message);
  AxisList all{0};
  RendezvousOptions rendezvous;
  rendezvous.storeDir = storeDir;
  rendezvous.timeout = options.timeout;
  // The ping-pong below runs between ranks 0 and 1.
  std::vector<TransferLink> links;
  if (options.ranks >= 2)
    links = {{0, 1}, {1, 0}};
  StatusOr<std::unique_ptr<Communicator>> comm =
      backend.connect(**device, *mesh, rank, {all}, links, rendezvous);
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

  // The other kinds a plan runs, as the runtime runs them (the device's
  // collective lowering: packing around the communicator's calls), at
  // sizes where bandwidth dominates and the packing runs at the memory's
  // rate, as a step's buckets and large tensors do (at 4 and 16 MiB it
  // stayed in the caches: 124M's ZeRO steps were predicted 35-41% fast).
  std::vector<KindPoint> kindPoints;
  for (int64_t bytes : options.quick
                           ? std::vector<int64_t>{1 << 20}
                           : std::vector<int64_t>{16 << 20, 64 << 20}) {
    for (const char *kind : {"all_gather", "reduce_scatter", "all_to_all"}) {
      StatusOr<double> seconds = timeCollective(**device, **comm, kind, bytes,
                                                options.ranks, options.quick);
      if (!seconds.ok())
        return seconds.status().withContext(kind);
      kindPoints.push_back({kind, static_cast<double>(bytes), *seconds});
    }
  }

  StatusOr<double> overlap =
      measureOverlap(**device, **comm, options.quick ? 1 << 20 : 16 << 20, 4);
  if (!overlap.ok())
    return overlap.status().withContext("overlapping an all-reduce");

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
  // Each kind's rate relative to the fitted link: the slope of its time
  // between its two largest sizes (latencies cancel) against its wire
  // bytes' (ring formulas: (n-1)/n of the whole tensor; a transfer: all
  // of it) over the fit's bandwidth; with one size, its time whole.
  std::map<std::string, std::vector<std::pair<double, double>>> byKind;
  for (const LinkPoint &point : points)
    if (point.kind == "send")
      byKind["send"].push_back({point.wireBytes, point.seconds});
  for (const KindPoint &point : kindPoints) {
    byKind[point.kind].push_back({(n - 1) / n * point.bytes, point.seconds});
    measured.push_back({{"kind", point.kind},
                        {"bytes", point.bytes},
                        {"seconds", point.seconds}});
  }
  for (auto &[kind, timed] : byKind) {
    std::sort(timed.begin(), timed.end());
    auto [wire, seconds] = timed.back();
    double rate = wire / seconds;
    if (timed.size() > 1) {
      auto [smaller, faster] = timed[timed.size() - 2];
      if (seconds > faster)
        rate = (wire - smaller) / (seconds - faster);
    }
    figures.relativeRate[kind] =
        std::clamp(rate / figures.bandwidth, 0.01, 100.0);
  }
  figures.overlap = *overlap;
  figures.record["communication_overlap"] = *overlap;
  figures.record["ranks"] = options.ranks;
  figures.record["points"] = std::move(measured);
  figures.record["relative_rate"] = figures.relativeRate;
  return figures;
}

} // namespace trellis::runtime::calibration
