//===- Trace.cpp - Measured timelines as Chrome traces --------------------===//

#include "trellis/Runtime/Trace.h"

#include "trellis/Common/FileKind.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

using json = nlohmann::json;

namespace trellis::runtime {

double monotonicMicros() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

json metadata(const char *kind, int64_t rank, int64_t thread,
              const std::string &name) {
  return json{{"ph", "M"},
              {"name", kind},
              {"pid", rank},
              {"tid", thread},
              {"args", {{"name", name}}}};
}

Status writeTraceFile(const std::string &path, json events) {
  std::string why = writeRegularFile(
      path, json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}
                    .dump() +
                "\n");
  if (!why.empty())
    return Status::error("cannot write the trace '" + path + "': " + why);
  return Status::success();
}

} // namespace

Status writeRankTrace(const std::string &path, int64_t rank,
                      const std::vector<TraceSlice> &slices) {
  json events = json::array();
  events.push_back(
      metadata("process_name", rank, 0, "rank " + std::to_string(rank)));
  events.push_back(metadata("thread_name", rank, 0, "compute"));
  events.push_back(metadata("thread_name", rank, 1, "communication"));
  for (const TraceSlice &slice : slices)
    events.push_back(
        json{{"ph", "X"},
             {"name", slice.name},
             {"pid", rank},
             {"tid", slice.lane == TraceSlice::Lane::Compute ? 0 : 1},
             {"ts", slice.startMicros},
             {"dur", slice.endMicros - slice.startMicros}});
  return writeTraceFile(path, std::move(events));
}

std::string rankTracePath(const std::string &path, int64_t rank) {
  return path + ".rank" + std::to_string(rank);
}

Status mergeRankTraces(const std::string &path, int64_t ranks) {
  json merged = json::array();
  double earliest = std::numeric_limits<double>::infinity();
  for (int64_t rank = 0; rank < ranks; ++rank) {
    std::string part = rankTracePath(path, rank);
    std::ifstream file(part);
    if (!file)
      return Status::error("cannot read the trace of rank " +
                           std::to_string(rank) + " ('" + part + "')");
    json trace = json::parse(file, nullptr, /*allow_exceptions=*/false);
    if (!trace.is_object() || !trace.contains("traceEvents") ||
        !trace["traceEvents"].is_array())
      return Status::error("expected a Chrome trace with traceEvents in '" +
                           part + "'");
    for (json &event : trace["traceEvents"]) {
      if (event.contains("ts") && event["ts"].is_number())
        earliest = std::min(earliest, event["ts"].get<double>());
      merged.push_back(std::move(event));
    }
  }
  for (json &event : merged)
    if (event.contains("ts") && event["ts"].is_number())
      event["ts"] = event["ts"].get<double>() - earliest;
  Status written = writeTraceFile(path, std::move(merged));
  if (!written.ok())
    return written;
  for (int64_t rank = 0; rank < ranks; ++rank)
    std::remove(rankTracePath(path, rank).c_str());
  return Status::success();
}

} // namespace trellis::runtime
