//===- TrainOptions.cpp - What trellis run is asked to do -----------------===//

#include "trellis/Runtime/TrainOptions.h"

#include "trellis/Common/FileKind.h"
#include "trellis/Runtime/TokenSource.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cmath>
#include <cstdio>

namespace trellis::runtime {

namespace {

/// The longest --timeout: a week (longer ones overflow the milliseconds
/// Gloo counts in, and mean "never").
constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;
/// More kernel threads than this is a typo, not a machine.
constexpr int kMaxThreads = 4096;

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

Status outOfRange(const std::string &flag, const std::string &expected,
                  const std::string &found) {
  return Status::error("expected " + flag + " " + expected + ", found " +
                       found);
}

/// An address a socket can bind or connect to: an IPv4 or IPv6 literal, or
/// a name the resolver knows.
Status checkResolvable(const std::string &flag, const std::string &host) {
  addrinfo hints{}, *result = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int error = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (error != 0)
    return Status::error(flag + ": cannot resolve '" + host +
                         "' (expected an IPv4 address, an IPv6 address or a "
                         "host name): " +
                         ::gai_strerror(error));
  ::freeaddrinfo(result);
  return Status::success();
}

Status checkFile(const std::string &flag, const std::string &path,
                 const std::string &expected) {
  if (std::string kind = whyNotRegularFile(path); !kind.empty())
    return Status::error(flag + ": '" + path + "' " + kind + ", expected " +
                         expected);
  return Status::success();
}

} // namespace

Status validateTrainOptions(const TrainOptions &options) {
  if (options.steps < 0)
    return outOfRange("--steps", ">= 0", std::to_string(options.steps));
  if (options.threads < 1 || options.threads > kMaxThreads)
    return outOfRange("--threads", "in [1, " + std::to_string(kMaxThreads) +
                                       "]",
                      std::to_string(options.threads));
  if (options.logEvery < 1)
    return outOfRange("--log-every", ">= 1", std::to_string(options.logEvery));
  if (options.saveEvery < 0 || options.keep < 0)
    return Status::error("expected --save-every and --keep >= 0, found " +
                         std::to_string(options.saveEvery) + " and " +
                         std::to_string(options.keep));
  if ((options.saveEvery > 0 || options.keep > 0) && options.saveDir.empty())
    return Status::error("--save-every and --keep need --save DIR (the "
                         "directory of the periodic checkpoints)");
  if (options.keep > 0 && options.saveEvery == 0)
    return Status::error("--keep counts periodic checkpoints: expected "
                         "--save-every N with it");
  // A checkpoint holds the weights too: --weights would be overwritten.
  if (!options.weightsPath.empty() && !options.loadDir.empty())
    return Status::error("--weights and --load both set the weights: --load "
                         "resumes a checkpoint (weights, optimizer states, "
                         "step); --weights starts a run from Hugging Face "
                         "weights. Give one");
  if (options.maxMemoryBytes < 0)
    return outOfRange("--max-memory", "MiB >= 0 (0: what is available)",
                      std::to_string(options.maxMemoryBytes >> 20));
  if (!std::isfinite(options.timeoutSeconds) || options.timeoutSeconds <= 0 ||
      options.timeoutSeconds > kMaxTimeoutSeconds)
    return outOfRange("--timeout",
                      "seconds > 0 and <= " + number(kMaxTimeoutSeconds),
                      number(options.timeoutSeconds));
  if (options.nproc < 1 || options.nnodes < 1 || options.nodeRank < 0 ||
      options.nodeRank >= options.nnodes)
    return Status::error("expected --nproc >= 1, --nnodes >= 1 and "
                         "--node-rank in [0, --nnodes), found " +
                         std::to_string(options.nproc) + ", " +
                         std::to_string(options.nnodes) + " and " +
                         std::to_string(options.nodeRank));
  if (options.masterPort < 0 || options.masterPort > 65535)
    return outOfRange("--master-port",
                      "in [1, 65535] (or 0: the rendezvous directory)",
                      std::to_string(options.masterPort));
  if (options.dataDtype != "uint16" && options.dataDtype != "uint32")
    return outOfRange("--data-dtype", "uint16 or uint32",
                      "'" + options.dataDtype + "'");
  if (options.onNonfinite != "stop" && options.onNonfinite != "skip" &&
      options.onNonfinite != "continue")
    return outOfRange("--on-nonfinite", "stop, skip or continue",
                      "'" + options.onNonfinite + "'");
  if (options.evalEvery < 0)
    return outOfRange("--eval-every", ">= 0 (0: after the last step only)",
                      std::to_string(options.evalEvery));
  if (options.evalBatches < 1 || options.evalBatches > (int64_t(1) << 20))
    return outOfRange("--eval-batches", "in [1, 2^20]",
                      std::to_string(options.evalBatches));
  if (options.evalEvery > 0 && options.evalData.empty())
    return Status::error("--eval-every " + std::to_string(options.evalEvery) +
                         " needs --eval-data: the held-out tokens to "
                         "evaluate on");
  if (!options.evalData.empty()) {
    StatusOr<std::vector<DataComponent>> components =
        parseDataComponents(options.evalData);
    if (!components.ok())
      return components.status().withContext("--eval-data");
    for (const DataComponent &component : *components)
      if (!whyNotDirectory(component.path).empty())
        TRELLIS_RETURN_IF_ERROR(
            checkFile("--eval-data", component.path,
                      "a file of " + options.dataDtype +
                          " token ids, a directory of them, or a blend"));
  }
  if (!isDataOrder(options.dataOrder))
    return outOfRange("--data-order", "random or sequential",
                      "'" + options.dataOrder + "'");
  if (!options.callerBatches && options.data != "synthetic" &&
      options.data != "repeat") {
    StatusOr<std::vector<DataComponent>> components =
        parseDataComponents(options.data);
    if (!components.ok())
      return components.status();
    for (const DataComponent &component : *components)
      if (!whyNotDirectory(component.path).empty())
        TRELLIS_RETURN_IF_ERROR(
            checkFile("--data", component.path,
                      "synthetic, repeat, a file of " + options.dataDtype +
                          " token ids, a directory of them, or a blend "
                          "WEIGHT:PATH,WEIGHT:PATH"));
  }
  if (!options.weightsPath.empty())
    TRELLIS_RETURN_IF_ERROR(checkFile("--weights", options.weightsPath,
                                      "a .safetensors file"));
  if (!options.rendezvousDir.empty())
    if (std::string kind = whyNotDirectory(options.rendezvousDir);
        !kind.empty())
      return Status::error("--rendezvous: '" + options.rendezvousDir + "' " +
                           kind +
                           ", expected a directory (on a filesystem every "
                           "node shares)");
  TRELLIS_RETURN_IF_ERROR(checkResolvable("--host", options.hostname));
  if (options.masterPort > 0)
    TRELLIS_RETURN_IF_ERROR(
        checkResolvable("--master-addr", options.masterAddr));
  return Status::success();
}

} // namespace trellis::runtime
