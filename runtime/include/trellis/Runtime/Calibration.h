//===- Calibration.h - A cluster description measured on this machine -*- C++
//-*-===//
//
// `trellis calibrate --device NAME`: measures one node of the machine it
// runs on through a backend's Device and Communicator, the interfaces a
// plan runs through, and writes what it found as a cluster description
// for the planner (docs/Planner.md's schema):
//  - matmuls of many sizes per element type: the peak and the GEMM curve's
//    half size, fitted to all of them;
//  - the memory bandwidth (a large add) and the cost of a launch (a tiny
//    one);
//  - every distinct compute instruction of the calibration plans, each
//    run alone over its own buffers: per op-table row, the share of its
//    roofline it reaches (`op_efficiency`);
//  - collectives among `ranks` processes of this node over the backend's
//    communicator (Gloo over loopback on CPUs): the link's bandwidth and
//    latency, fitted to all-reduces and point-to-point transfers of many
//    sizes with the planner's own formulas.
// What it measured is kept under `calibration` (sizes, rates, fits and
// their errors) so a reader can check the fits.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CALIBRATION_H
#define TRELLIS_RUNTIME_CALIBRATION_H

#include "trellis/Runtime/Status.h"

#include <chrono>
#include <string>
#include <vector>

namespace trellis::runtime {

struct CalibrationOptions {
  /// The backend measured ("cpu", "cuda").
  std::string device = "cpu";
  /// Threads of each rank's device (the `trellis run --threads` the file
  /// is for).
  int threads = 1;
  /// Ranks this node runs (the cluster's devices per node); collectives
  /// are measured among that many processes.
  int64_t ranks = 1;
  /// Plans whose compute instructions are measured one by one.
  std::vector<std::string> plans;
  /// Fewer sizes and repetitions: a file in seconds, for tests.
  bool quick = false;
  /// Bound on connecting the ranks and on each collective.
  std::chrono::milliseconds timeout{60000};
  /// A name for the cluster (default: the device's and the thread count).
  std::string name;
};

/// Measures and returns the cluster description as JSON text. Progress
/// lines go to standard error. Fails naming what could not be measured (a
/// backend that is not built or has no device, a plan that does not load,
/// a rank that failed).
StatusOr<std::string> calibrate(const CalibrationOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_CALIBRATION_H
