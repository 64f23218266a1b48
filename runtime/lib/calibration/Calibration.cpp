//===- Calibration.cpp - A cluster description measured on this machine ---===//
//
// Rank 0 forks the node's other ranks before any device exists (no thread
// pool crosses a fork); all of them time collectives together, then
// kernels, each on its own device: each figure is one rank's device while
// the node's other ranks work too, as a plan's ranks do. The file keeps,
// figure by figure, the slowest rank's: a step waits for it.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Calibration.h"

#include "Measurements.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace trellis::runtime {

namespace {

using calibration::KernelFigures;
using calibration::LinkFigures;

/// What rank 0 measured: the links among the ranks and its kernels.
struct NodeFigures {
  LinkFigures links;
  KernelFigures kernels;
};

std::string rankFiguresPath(const std::string &storeDir, int64_t rank) {
  return storeDir + "/kernels." + std::to_string(rank) + ".json";
}

/// The figures the model reads, for rank 0 to merge.
std::string kernelFiguresJson(const KernelFigures &figures) {
  nlohmann::json json = {{"memory_bandwidth", figures.memoryBandwidth},
                         {"kernel_overhead_s", figures.kernelOverhead},
                         {"attention_efficiency", figures.attentionEfficiency},
                         {"op_efficiency", figures.opEfficiency}};
  for (const auto &[dtype, fit] : figures.gemm)
    json["gemm"][dtype] = {{"peak", fit.peak}, {"half_size", fit.halfSize}};
  return json.dump();
}

/// A step waits for its slowest rank: keeps, figure by figure, the slower
/// of `figures` and another rank's (`other`, kernelFiguresJson's).
void keepSlower(KernelFigures &figures, const nlohmann::json &other) {
  figures.memoryBandwidth =
      std::min(figures.memoryBandwidth,
               other.value("memory_bandwidth", double(INFINITY)));
  figures.kernelOverhead =
      std::max(figures.kernelOverhead, other.value("kernel_overhead_s", 0.0));
  if (other.contains("attention_efficiency") &&
      other["attention_efficiency"].get<double>() > 0)
    figures.attentionEfficiency =
        std::min(figures.attentionEfficiency,
                 other["attention_efficiency"].get<double>());
  if (other.contains("op_efficiency"))
    for (const auto &[op, share] : other["op_efficiency"].items())
      if (auto found = figures.opEfficiency.find(op);
          found != figures.opEfficiency.end())
        found->second = std::min(found->second, share.get<double>());
  // The slower GEMM curve at a middling size (256 each way).
  auto rateAt256 = [](double peak, double half) {
    return peak * std::pow(256.0 / (256.0 + half), 3);
  };
  if (other.contains("gemm"))
    for (const auto &[dtype, fit] : other["gemm"].items()) {
      auto found = figures.gemm.find(dtype);
      if (found == figures.gemm.end())
        continue;
      double peak = fit["peak"].get<double>(),
             half = fit["half_size"].get<double>();
      if (rateAt256(peak, half) <
          rateAt256(found->second.peak, found->second.halfSize)) {
        found->second.peak = peak;
        found->second.halfSize = half;
      }
    }
}

/// One rank's measurements: the links (with several ranks), then the
/// kernels, while the node's other ranks measure theirs (a plan's ranks
/// share the machine's memory bandwidth and caches too).
StatusOr<NodeFigures> measureRank(const Backend &backend, int64_t rank,
                                  const std::string &storeDir,
                                  const CalibrationOptions &options) {
  NodeFigures figures;
  if (options.ranks > 1) {
    if (rank == 0)
      std::fprintf(stderr, "trellis calibrate: collectives among %lld ranks\n",
                   static_cast<long long>(options.ranks));
    StatusOr<LinkFigures> links =
        calibration::measureLinks(backend, rank, storeDir, options);
    if (!links.ok())
      return links.status().withContext("timing collectives among " +
                                        std::to_string(options.ranks) +
                                        " ranks");
    figures.links = std::move(*links);
  }
  StatusOr<std::unique_ptr<Device>> device = backend.createDevice(
      {options.threads, rank, options.ranks, /*maxMemoryBytes=*/0});
  if (!device.ok())
    return device.status();
  StatusOr<KernelFigures> kernels =
      calibration::measureKernels(**device, options, /*progress=*/rank == 0);
  if (!kernels.ok())
    return kernels.status();
  figures.kernels = std::move(*kernels);
  return figures;
}

/// Rank 0's measurements, the node's other ranks (forked before any
/// device exists) measuring beside it.
StatusOr<NodeFigures> measureNode(const Backend &backend,
                                  const CalibrationOptions &options) {
  std::error_code noTemporary;
  std::string pattern = (std::filesystem::temp_directory_path(noTemporary) /
                         "trellis-calibrate-XXXXXX")
                            .string();
  if (noTemporary || !mkdtemp(pattern.data()))
    return Status::error(
        "cannot make the calibration ranks' rendezvous directory '" + pattern +
        "': " + (noTemporary ? noTemporary.message() : std::strerror(errno)));
  std::string storeDir = pattern;
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int64_t rank = 1; rank < options.ranks; ++rank) {
    pid_t child = fork();
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      StatusOr<NodeFigures> figures =
          measureRank(backend, rank, storeDir, options);
      if (figures.ok()) {
        std::ofstream file(rankFiguresPath(storeDir, rank));
        file << kernelFiguresJson(figures->kernels);
        if (!file.flush())
          figures = Status::error(storeDir + ": " + std::strerror(errno));
      }
      // Rank 0 reports a failure: the reason is left for it.
      if (!figures.ok())
        std::ofstream(rankFiguresPath(storeDir, rank) + ".error")
            << figures.status().message();
      _exit(figures.ok() ? 0 : 1);
    }
    if (child < 0)
      break;
    children.push_back(child);
  }
  StatusOr<NodeFigures> figures =
      static_cast<int64_t>(children.size()) + 1 == options.ranks
          ? measureRank(backend, 0, storeDir, options)
          : StatusOr<NodeFigures>(
                Status::error(std::string("fork: ") + std::strerror(errno)));
  if (!figures.ok())
    for (pid_t child : children)
      kill(child, SIGKILL);
  std::string failedRanks;
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    waitpid(children[i], &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      continue;
    std::ifstream reasonFile(rankFiguresPath(storeDir, i + 1) + ".error");
    std::string reason((std::istreambuf_iterator<char>(reasonFile)),
                       std::istreambuf_iterator<char>());
    failedRanks += (failedRanks.empty() ? "" : "; ") + std::to_string(i + 1) +
                   ": " + (reason.empty() ? "died" : reason);
  }
  if (figures.ok() && failedRanks.empty())
    for (int64_t rank = 1; rank < options.ranks; ++rank) {
      std::ifstream file(rankFiguresPath(storeDir, rank));
      nlohmann::json other = nlohmann::json::parse(file, nullptr, false);
      if (other.is_discarded()) {
        failedRanks += (failedRanks.empty() ? "" : "; ") +
                       std::to_string(rank) + ": its figures are unreadable";
        continue;
      }
      keepSlower(figures->kernels, other);
    }
  std::error_code ignored;
  std::filesystem::remove_all(storeDir, ignored);
  if (!figures.ok())
    return figures.status();
  if (!failedRanks.empty())
    return Status::error("calibration rank " + failedRanks);
  figures->kernels.record["ranks_measuring"] = options.ranks;
  return figures;
}

nlohmann::json linkJson(const LinkFigures &links) {
  nlohmann::json json = {{"bandwidth", links.bandwidth},
                         {"latency_s", links.latency},
                         {"efficiency", 1.0}};
  if (!links.relativeRate.empty())
    json["relative_rate"] = links.relativeRate;
  return json;
}

} // namespace

StatusOr<std::string> calibrate(const CalibrationOptions &options) {
  if (options.threads < 1)
    return Status::error("--threads must be at least 1, found " +
                         std::to_string(options.threads));
  if (options.ranks < 1 || options.ranks > 256)
    return Status::error("--ranks must be from 1 to 256, found " +
                         std::to_string(options.ranks));
  StatusOr<const Backend *> backend = findBackend(options.device);
  if (!backend.ok())
    return backend.status();

  StatusOr<NodeFigures> node = measureNode(**backend, options);
  if (!node.ok())
    return node.status();
  LinkFigures &links = node->links;
  KernelFigures &kernels = node->kernels;
  // The device's memory as a plan's rank sees it.
  StatusOr<std::unique_ptr<Device>> device = (*backend)->createDevice(
      {options.threads, 0, options.ranks, /*maxMemoryBytes=*/0});
  if (!device.ok())
    return device.status();
  MemoryBudget budget = (*device)->memoryBudget();
  if (budget.bytes <= 0)
    return Status::error("the " + options.device +
                         " device cannot tell its memory");
  if (options.ranks == 1) {
    // Nothing to measure between ranks: a link as fast as memory, so a
    // plan over more devices than measured is not priced as free.
    links.bandwidth = kernels.memoryBandwidth;
    links.latency = kernels.kernelOverhead;
    links.record["ranks"] = 1;
    links.record["note"] = "one rank: not measured (the memory bandwidth)";
  }

  nlohmann::json peaks = nlohmann::json::object();
  for (const auto &[dtype, fit] : kernels.gemm)
    peaks[dtype] = fit.peak;
  nlohmann::json opEfficiency = nlohmann::json::object();
  for (const auto &[op, share] : kernels.opEfficiency)
    opEfficiency[op] = share;
  const calibration::GemmFit &f32 = kernels.gemm.at("f32");
  std::string name = options.name;
  if (name.empty())
    name = options.device + ", " + std::to_string(options.threads) +
           (options.threads == 1 ? " thread" : " threads") + " per rank, " +
           std::to_string(options.ranks) + " ranks (trellis calibrate)";
  nlohmann::json cluster = {
      {"name", name},
      {"devices_per_node", options.ranks},
      {"device",
       {{"name", (*device)->name() + " (" + budget.source + ")"},
        {"memory_bytes", static_cast<double>(budget.bytes)},
        {"usable_memory_fraction", 0.9},
        {"memory_bandwidth", kernels.memoryBandwidth},
        {"memory_efficiency", 1.0},
        {"peak_flops", peaks},
        {"gemm_efficiency", 1.0},
        {"gemm_half_size", f32.halfSize},
        {"attention_efficiency",
         kernels.attentionEfficiency > 0 ? kernels.attentionEfficiency : 0.5},
        {"kernel_overhead_s", kernels.kernelOverhead},
        {"communication_overlap", links.overlap},
        {"op_efficiency", opEfficiency}}},
      {"intra_node", linkJson(links)},
      // One node: nothing crosses a network.
      {"inter_node", linkJson(links)},
      {"calibration",
       {{"device", options.device},
        {"threads", options.threads},
        {"ranks", options.ranks},
        {"kernels", kernels.record},
        {"links", links.record}}},
  };
  return cluster.dump(2) + "\n";
}

} // namespace trellis::runtime
