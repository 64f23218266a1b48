//===- Faults.cpp - Faults trellis run injects for tests ------------------===//
//
// --inject-fault kills, hangs or overflows a rank before a step;
// --inject-save-fault makes a step's checkpoint fail part way.
//
//===----------------------------------------------------------------------===//

#include "TrainingRun.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace trellis::runtime {

namespace {

StatusOr<Fault> parseFault(const std::string &text) {
  Fault fault;
  if (text.empty())
    return fault;
  size_t first = text.find(':'), second = text.rfind(':');
  if (first == std::string::npos || first == second)
    return Status::error("expected --inject-fault crash:RANK:STEP, "
                         "hang:RANK:STEP or overflow:RANK:STEP, found '" +
                         text + "'");
  fault.action = text.substr(0, first);
  fault.rank = std::atoll(text.substr(first + 1, second - first - 1).c_str());
  fault.step = std::atoll(text.substr(second + 1).c_str());
  if (fault.action != "crash" && fault.action != "hang" &&
      fault.action != "overflow")
    return Status::error("unknown fault '" + fault.action +
                         "': expected crash, hang or overflow");
  return fault;
}

StatusOr<SaveFault> parseSaveFault(const std::string &text) {
  SaveFault parsed;
  if (text.empty())
    return parsed;
  size_t colon = text.rfind(':');
  std::string point = text.substr(0, colon);
  if (colon == std::string::npos ||
      (point != "model.safetensors" && point != "optimizer.safetensors" &&
       point != "commit"))
    return Status::error("expected --inject-save-fault model.safetensors:STEP, "
                         "optimizer.safetensors:STEP or commit:STEP, found '" +
                         text + "'");
  parsed.step = std::atoll(text.substr(colon + 1).c_str());
  if (point == "commit")
    parsed.fault.beforeCommit = true;
  else
    parsed.fault.afterFile = point;
  return parsed;
}

} // namespace

StatusOr<InjectedFaults> parseInjectedFaults(const TrainOptions &options) {
  StatusOr<Fault> fault = parseFault(options.injectFault);
  if (!fault.ok())
    return fault.status();
  StatusOr<SaveFault> saveFault = parseSaveFault(options.injectSaveFault);
  if (!saveFault.ok())
    return saveFault.status();
  return InjectedFaults{*fault, *saveFault};
}

void injectDueFault(Trainer &trainer, const Fault &fault) {
  if (fault.rank != trainer.rank() ||
      fault.step != trainer.completedSteps() + 1)
    return;
  std::fflush(stdout);
  if (fault.action == "crash")
    std::raise(SIGKILL);
  if (fault.action == "overflow") {
    trainer.injectOverflow();
    return;
  }
  while (true)
    std::this_thread::sleep_for(std::chrono::seconds(1));
}

} // namespace trellis::runtime
