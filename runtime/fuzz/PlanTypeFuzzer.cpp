//===- PlanTypeFuzzer.cpp - Every field of a plan as every JSON type ------===//
//
// Usage: trellis-plan-type-fuzz [--seconds=N] PLAN...
//
// For each plan, every field (each member of each object and the first and
// last element of each array, at every depth, the top level included) is
// replaced by each JSON type (null, true, 0, -1, 2^62, 0.5, "x", [], {})
// and, for object members, left out. The loader must answer each such plan
// with a plan or an error, never an exception or a crash; a plan that
// loads runs each of its stages once on the CPU without peers (transfers
// fail cleanly), so that a field the checks let through cannot crash a
// kernel either. Prints the counts; exits 1 naming every field whose
// mutation threw. With --seconds, stops trying new plans after N seconds
// (scripts/fuzz.sh types bounds a run so) and says how many were left.
//
//===----------------------------------------------------------------------===//

#include "RunStages.h"

#include "trellis/Common/FileKind.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

using namespace trellis::runtime;
using json = nlohmann::json;

namespace {

/// The values every field is replaced by: one of each JSON type, with the
/// integers a reader might take as a size, an index or a count.
std::vector<std::pair<std::string, json>> replacements() {
  return {{"null", json(nullptr)},
          {"true", json(true)},
          {"0", json(0)},
          {"-1", json(-1)},
          {"2^62", json(int64_t(1) << 62)},
          {"0.5", json(0.5)},
          {"\"x\"", json("x")},
          {"[]", json::array()},
          {"{}", json::object()}};
}

/// The pointers of the fields mutated: every member of every object, the
/// first and last element of every array.
void collectFields(const json &node, const json::json_pointer &at,
                   std::vector<json::json_pointer> &fields) {
  fields.push_back(at);
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      collectFields(it.value(), at / it.key(), fields);
  } else if (node.is_array() && !node.empty()) {
    collectFields(node.front(), at / 0, fields);
    if (node.size() > 1)
      collectFields(node.back(), at / (node.size() - 1), fields);
  }
}

struct Counts {
  int64_t plans = 0, loaded = 0, refused = 0;
  std::vector<std::string> threw;
};

/// Loads `text`; a plan that loads runs each stage once.
void tryPlan(const std::string &text, const std::string &what, Device &device,
             Counts &counts) {
  ++counts.plans;
  try {
    StatusOr<Plan> plan = parsePlan(text);
    if (!plan.ok()) {
      ++counts.refused;
      return;
    }
    ++counts.loaded;
    // A mutation that makes a plan large (a shape of 2^62 is refused, but
    // a size of 2^20 is not) is loaded, not run.
    runEachStage(*plan, device, int64_t(1) << 24);
  } catch (const std::exception &error) {
    counts.threw.push_back(what + ": " + error.what());
  }
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> paths;
  double seconds = 0;
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    if (argument.rfind("--seconds=", 0) == 0) {
      char *end = nullptr;
      seconds = std::strtod(argument.c_str() + 10, &end);
      if (*end != '\0' || !(seconds > 0)) {
        std::fprintf(stderr, "--seconds: expected a number > 0, found '%s'\n",
                     argument.c_str() + 10);
        return 2;
      }
    } else {
      paths.push_back(argument);
    }
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: %s [--seconds=N] PLAN...\n", argv[0]);
    return 2;
  }
  auto start = std::chrono::steady_clock::now();
  auto timeUp = [&] {
    return seconds > 0 && std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                                  .count() > seconds;
  };
  int64_t untried = 0;
  StatusOr<const Backend *> cpu = findBackend("cpu");
  StatusOr<std::unique_ptr<Device>> device =
      cpu.ok() ? (*cpu)->createDevice({}) : cpu.status();
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", device.status().message().c_str());
    return 1;
  }
  Counts counts;
  for (const std::string &path : paths) {
    std::string text;
    std::string why = trellis::readRegularFile(path, text, kMaxPlanFileBytes);
    json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!why.empty() || root.is_discarded() || !parsePlan(text).ok()) {
      std::fprintf(stderr, "%s: not a plan this runtime loads\n", path.c_str());
      return 1;
    }
    std::vector<json::json_pointer> fields;
    collectFields(root, json::json_pointer(), fields);
    for (const json::json_pointer &field : fields) {
      if (timeUp()) {
        untried += static_cast<int64_t>(replacements().size()) + 1;
        continue;
      }
      std::string where =
          path + " " + (field.empty() ? "(top level)" : field.to_string());
      for (const auto &[name, value] : replacements()) {
        json mutated = root;
        mutated[field] = value;
        tryPlan(mutated.dump(), where + " = " + name, **device, counts);
      }
      if (!field.empty() && root[field.parent_pointer()].is_object()) {
        json mutated = root;
        mutated[field.parent_pointer()].erase(field.back());
        tryPlan(mutated.dump(), where + " left out", **device, counts);
      }
    }
  }
  std::printf("%lld plans: %lld loaded, %lld refused, %zu threw\n",
              static_cast<long long>(counts.plans),
              static_cast<long long>(counts.loaded),
              static_cast<long long>(counts.refused), counts.threw.size());
  if (untried)
    std::printf("about %lld plans left untried after %g seconds\n",
                static_cast<long long>(untried), seconds);
  for (const std::string &failure : counts.threw)
    std::printf("threw: %s\n", failure.c_str());
  return counts.threw.empty() ? 0 : 1;
}
