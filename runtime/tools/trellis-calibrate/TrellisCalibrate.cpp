//===- TrellisCalibrate.cpp - Measures this machine for the planner -------===//
//
// `trellis-calibrate`: `trellis calibrate ARGS` runs it with the plans of
// its calibration models added (runtime/Calibration.h).
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Calibration.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

int main(int argc, char **argv) {
  trellis::runtime::CalibrationOptions options;
  std::string output;
  int64_t timeoutSeconds = 60;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  CLI::App app("Measures this machine's kernels and the links among its "
               "ranks, and writes a cluster description for `trellis plan "
               "--cluster` (docs/Planner.md)",
               "trellis calibrate");
  app.add_option("--device", options.device,
                 "The backend measured (cpu; cuda where built)")
      ->capture_default_str();
  app.add_option("--threads", options.threads,
                 "Kernel threads per rank: the `trellis run --threads` the "
                 "file is for")
      ->capture_default_str();
  app.add_option("--ranks", options.ranks,
                 "Ranks this machine runs (the file's devices per node; "
                 "default: its cores over --threads)");
  app.add_option("--plan", options.plans,
                 "A plan whose compute instructions are measured one by one "
                 "(trellis calibrate adds its calibration models')");
  app.add_flag("--quick", options.quick,
               "Fewer sizes and repetitions: a rough file in seconds");
  app.add_option("--timeout", timeoutSeconds,
                 "Seconds to connect the ranks and for each collective")
      ->capture_default_str();
  app.add_option("--name", options.name, "The cluster's name in the file");
  app.add_option("-o,--output", output, "The cluster file to write")
      ->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError &error) {
    std::fprintf(stderr,
                 "trellis calibrate: error: %s (see 'trellis calibrate "
                 "--help')\n",
                 error.what());
    return 1;
  }
  if (app.count("--ranks") == 0)
    options.ranks = std::max<int64_t>(1, cores / std::max(options.threads, 1));
  if (timeoutSeconds < 1) {
    std::fprintf(stderr, "trellis calibrate: error: --timeout must be at "
                         "least 1 second\n");
    return 1;
  }
  options.timeout = std::chrono::seconds(timeoutSeconds);
  // Written whole or not at all, and refused before measuring when it
  // cannot be written.
  std::string partial = output + ".partial";
  std::ofstream file(partial, std::ios::binary | std::ios::trunc);
  auto fail = [&](const std::string &message) {
    std::fprintf(stderr, "trellis calibrate: error: %s\n", message.c_str());
    std::remove(partial.c_str());
    return 1;
  };
  if (!file)
    return fail("cannot write '" + output + "': " + std::strerror(errno));
  trellis::runtime::StatusOr<std::string> cluster =
      trellis::runtime::calibrate(options);
  if (!cluster.ok())
    return fail(cluster.status().message());
  file << *cluster;
  file.close();
  if (!file)
    return fail("cannot write '" + output + "': " + std::strerror(errno));
  if (std::rename(partial.c_str(), output.c_str()) != 0)
    return fail("cannot write '" + output + "': " + std::strerror(errno));
  std::printf("wrote %s\n", output.c_str());
  return 0;
}
