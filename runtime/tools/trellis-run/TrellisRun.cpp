//===- TrellisRun.cpp - Trains a compiled plan ----------------------------===//
//
// `trellis-run`: the runtime's own tool, built by the runtime project alone
// (no MLIR, no LLVM). `trellis run ARGS` executes `trellis-run ARGS`, and
// the launcher starts every rank as this program.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/Trainer.h"

#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char **argv) {
  trellis::runtime::TrainOptions options;
  CLI::App app("Trains a compiled plan (one process per rank)", "trellis run");
  app.add_option("plan", options.planPath, "The plan file")->required();
  app.add_option("--steps", options.steps, "Training steps to run")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "Seed of initialization and data")
      ->capture_default_str();
  app.add_option("--data", options.data,
                 "synthetic (default), repeat (one batch, to overfit), or a "
                 "binary token file");
  app.add_option("--data-dtype", options.dataDtype,
                 "Token file element type: uint16 or uint32")
      ->capture_default_str();
  app.add_option("--save", options.saveDir,
                 "Write a checkpoint into this directory at the end, "
                 "committed as a whole (with --save-every: the directory of "
                 "the step-N checkpoints)");
  app.add_option("--save-every", options.saveEvery,
                 "Also save every N steps, into DIR/step-N")
      ->capture_default_str();
  app.add_option("--keep", options.keep,
                 "Keep the newest K periodic checkpoints (0: all); older ones "
                 "are deleted once a new one is committed")
      ->capture_default_str();
  app.add_option("--load", options.loadDir,
                 "Resume from this checkpoint (or the newest step-N "
                 "checkpoint in this directory)");
  app.add_option("--weights", options.weightsPath,
                 "Initial weights: a Hugging Face .safetensors file");
  std::string devices;
  for (const trellis::runtime::Backend *backend :
       trellis::runtime::registeredBackends())
    devices += "\n  " + backend->name() + ": " + backend->description();
  app.add_option("--device", options.device,
                 "The backend that runs the plan:" + devices)
      ->capture_default_str();
  app.add_option("--threads", options.threads,
                 "Threads of the device's kernels (CPU: OpenBLAS threads)")
      ->capture_default_str();
  app.add_option("--log-every", options.logEvery, "Print every N steps")
      ->capture_default_str();
  app.add_flag("--profile", options.profile, "Print the time spent per op kind");
  app.add_option("--trace", options.tracePath,
                 "Write the measured timeline (a row per rank for compute and "
                 "one for communication) as a Chrome trace");
  app.add_option("--nproc", options.nproc,
                 "Processes (ranks) to start on this node")
      ->capture_default_str();
  app.add_option("--nnodes", options.nnodes, "Nodes taking part")
      ->capture_default_str();
  app.add_option("--node-rank", options.nodeRank, "This node's index")
      ->capture_default_str();
  app.add_option("--rendezvous", options.rendezvousDir,
                 "Directory the ranks meet in (shared by all nodes; default: "
                 "a fresh temporary one)");
  app.add_option("--master-addr", options.masterAddr,
                 "Address of node 0, whose launcher serves the rendezvous "
                 "store")
      ->capture_default_str();
  app.add_option("--master-port", options.masterPort,
                 "Port of the rendezvous store on node 0 (0: a directory "
                 "store)")
      ->capture_default_str();
  app.add_option("--host", options.hostname,
                 "Address this node's ranks listen on")
      ->capture_default_str();
  app.add_option("--timeout", options.timeoutSeconds,
                 "Seconds a collective may wait before the rank fails (a dead "
                 "or hung rank fails the job within this bound)")
      ->capture_default_str();
  // Set by the launcher, and for fault-injection tests: not for users.
  app.add_option("--rank", options.rank, "Global rank of this process")
      ->group("");
  app.add_option("--inject-fault", options.injectFault,
                 "crash:RANK:STEP, hang:RANK:STEP or overflow:RANK:STEP")
      ->group("");
  app.add_option("--inject-save-fault", options.injectSaveFault,
                 "model.safetensors:STEP, optimizer.safetensors:STEP or "
                 "commit:STEP: killed inside that save")
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError &error) {
    std::fprintf(stderr, "trellis run: error: %s (see 'trellis run --help')\n",
                 error.what());
    return 1;
  }
  options.logEvery = std::max<int64_t>(1, options.logEvery);
  options.command.assign(argv, argv + argc);
  return trellis::runtime::runTrainingCommand(options);
}
