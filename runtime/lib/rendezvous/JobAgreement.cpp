//===- JobAgreement.cpp - Ranks agree they run the same job ---------------===//
//
// Keys: "trellis.job.owner.<rank>" names the process that claimed the rank
// (host, pid and a nonce; claimed once, so a second process started as the
// same rank is refused); "trellis.job.<rank>" holds a rank's fields as
// "name=value" lines; "trellis.job.verdict" holds "agreed" or "differs: "
// and the message.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Rendezvous.h"

#include <unistd.h>

#include <cstdio>
#include <random>

namespace trellis::runtime {

namespace {

const std::string kPrefix = "trellis.job.";
const std::string kAgreed = "agreed";
const std::string kDiffers = "differs: ";

std::vector<char> encode(const JobFields &fields) {
  std::string text;
  for (const auto &[name, value] : fields)
    text += name + "=" + value + "\n";
  return std::vector<char>(text.begin(), text.end());
}

JobFields decode(const std::vector<char> &bytes) {
  JobFields fields;
  std::string text(bytes.begin(), bytes.end());
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    std::string line = text.substr(start, end - start);
    size_t equals = line.find('=');
    if (equals != std::string::npos)
      fields.emplace_back(line.substr(0, equals), line.substr(equals + 1));
    start = end + 1;
  }
  return fields;
}

/// The first difference of `other` (rank `rank`) from rank 0's `fields`,
/// or "".
std::string compare(const JobFields &fields, const JobFields &other,
                    int64_t rank) {
  for (size_t i = 0; i < fields.size() || i < other.size(); ++i) {
    const std::string &name = i < fields.size() ? fields[i].first
                                                : other[i].first;
    std::string mine = i < fields.size() ? fields[i].second : "(none)";
    std::string theirs = "(none)";
    for (const auto &[otherName, value] : other)
      if (otherName == name)
        theirs = value;
    if (mine != theirs)
      return "rank " + std::to_string(rank) + " does not run the same job " +
             "as rank 0: its " + name + " is " + theirs + ", rank 0's is " +
             mine + " (every rank must start with the same plan and options)";
  }
  return "";
}

/// This process, for the rank it claims: "host H, pid P (nonce N)".
std::string processIdentity() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0)
    std::snprintf(host, sizeof(host), "an unnamed host");
  std::random_device entropy;
  return "host " + std::string(host) + ", pid " + std::to_string(getpid()) +
         " (nonce " + std::to_string(entropy()) + ")";
}

} // namespace

Status agreeOnJob(RendezvousStore &store, int64_t rank, int64_t worldSize,
                  const JobFields &fields, std::chrono::milliseconds timeout) {
  // A failure of the store while waiting for `other` names that rank.
  auto waitingFor = [](int64_t other, const Status &status) {
    return Status::error("rendezvous: waiting for rank " +
                         std::to_string(other) + ": " + status.message());
  };
  // One process per rank: a second one started as this rank (two nodes
  // given one --node-rank, a reused rendezvous directory) is refused here,
  // before it can take the first one's place in the job.
  std::string identity = processIdentity();
  StatusOr<std::vector<char>> owner =
      store.claim(kPrefix + "owner." + std::to_string(rank),
                  std::vector<char>(identity.begin(), identity.end()));
  if (!owner.ok())
    return Status::error("rendezvous: " + owner.status().message());
  if (std::string(owner->begin(), owner->end()) != identity)
    return Status::error(
        "rendezvous: rank " + std::to_string(rank) +
        " is already taken by another process (" +
        std::string(owner->begin(), owner->end()) +
        "): two nodes started with the same --node-rank, two launchers "
        "giving the same rank, or a --rendezvous directory used before");
  if (Status status = store.set(kPrefix + std::to_string(rank), encode(fields));
      !status.ok())
    return Status::error("rendezvous: " + status.message());
  std::string verdict;
  if (rank == 0) {
    for (int64_t other = 1; other < worldSize && verdict.empty(); ++other) {
      StatusOr<std::vector<char>> theirs =
          store.get(kPrefix + std::to_string(other), timeout);
      if (!theirs.ok())
        return waitingFor(other, theirs.status());
      verdict = compare(fields, decode(*theirs), other);
    }
    std::string value = verdict.empty() ? kAgreed : kDiffers + verdict;
    if (Status status = store.set(
            kPrefix + "verdict", std::vector<char>(value.begin(), value.end()));
        !status.ok())
      return Status::error("rendezvous: " + status.message());
  } else {
    StatusOr<std::vector<char>> bytes = store.get(kPrefix + "verdict", timeout);
    if (!bytes.ok())
      return waitingFor(0, bytes.status());
    std::string value(bytes->begin(), bytes->end());
    if (value.rfind(kDiffers, 0) == 0)
      verdict = value.substr(kDiffers.size());
    else if (value != kAgreed)
      verdict = "rendezvous: rank 0's verdict is malformed: '" + value + "'";
  }
  if (!verdict.empty())
    return Status::error(verdict);
  return Status::success();
}

} // namespace trellis::runtime
