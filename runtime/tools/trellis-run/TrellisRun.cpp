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
  const char *kTraining = "Training";
  const char *kCheckpoints = "Checkpoints";
  const char *kDevice = "Device and measurement";
  const char *kLaunch = "Processes and rendezvous";
  const char *kFaults = "Faults";
  CLI::App app("Trains a compiled plan (one process per rank)", "trellis run");
  app.add_option("plan", options.planPath, "The plan file")->required();
  app.add_option("--steps", options.steps, "Training steps to run")
      ->capture_default_str()
      ->group(kTraining);
  app.add_option("--seed", options.seed, "Seed of initialization and data")
      ->capture_default_str()
      ->group(kTraining);
  app.add_option("--data", options.data,
                 "synthetic (default), repeat (one batch, to overfit), a "
                 "binary token file, a directory of them (shards, in name "
                 "order), or a blend WEIGHT:PATH,WEIGHT:PATH")
      ->group(kTraining);
  app.add_option("--eval-data", options.evalData,
                 "Held-out tokens to evaluate on (a file, shards or a "
                 "blend, as --data): the mean loss of its first "
                 "--eval-batches batches, after the last step and every "
                 "--eval-every steps")
      ->group(kTraining);
  app.add_option("--eval-every", options.evalEvery,
                 "Evaluate every N steps (0: after the last step only)")
      ->capture_default_str()
      ->group(kTraining);
  app.add_option("--eval-batches", options.evalBatches,
                 "Batches of --eval-data each evaluation reads")
      ->capture_default_str()
      ->group(kTraining);
  app.add_option("--data-order", options.dataOrder,
                 "random: windows at positions drawn from the seed; "
                 "sequential: one window after another")
      ->capture_default_str()
      ->group(kTraining);
  app.add_option("--data-dtype", options.dataDtype,
                 "Token file element type: uint16 or uint32")
      ->capture_default_str()
      ->group(kTraining);
  app.add_option("--save", options.saveDir,
                 "Write a checkpoint into this directory at the end, "
                 "committed as a whole (with --save-every: the directory of "
                 "the step-N checkpoints)")
      ->group(kCheckpoints);
  app.add_option("--save-every", options.saveEvery,
                 "Also save every N steps, into DIR/step-N")
      ->capture_default_str()
      ->group(kCheckpoints);
  app.add_option("--keep", options.keep,
                 "Keep the newest K periodic checkpoints (0: all); older ones "
                 "are deleted once a new one is committed")
      ->capture_default_str()
      ->group(kCheckpoints);
  app.add_option("--load", options.loadDir,
                 "Resume from this checkpoint (or the newest step-N "
                 "checkpoint in this directory)")
      ->group(kCheckpoints);
  app.add_option("--weights", options.weightsPath,
                 "Initial weights: a Hugging Face .safetensors file")
      ->group(kTraining);
  std::string devices;
  for (const trellis::runtime::Backend *backend :
       trellis::runtime::registeredBackends())
    devices += "\n  " + backend->name() + ": " + backend->description();
  app.add_option("--device", options.device,
                 "The backend that runs the plan:" + devices)
      ->capture_default_str()
      ->group(kDevice);
  app.add_option("--threads", options.threads,
                 "Threads of the device's kernels (CPU: OpenBLAS threads)")
      ->capture_default_str()
      ->group(kDevice);
  app.add_option("--log-every", options.logEvery, "Print every N steps")
      ->capture_default_str()
      ->group(kTraining);
  app.add_option("--metrics", options.metricsPath,
                 "Write one JSON record per step to FILE (JSON Lines: step, "
                 "loss, lr, grad_norm, tokens_per_s, step_ms, loss_scale, "
                 "skipped, eval_loss, peak_memory_mib; docs/Training.md); a "
                 "run resumed "
                 "with --load appends")
      ->group(kTraining);
  app.add_option("--cuda-graph", options.cudaGraph,
                 "Record the second step as a CUDA graph and replay it at "
                 "every later step (--device cuda; false: launch each kernel "
                 "every step)")
      ->capture_default_str()
      ->group(kDevice);
  app.add_flag("--profile", options.profile, "Print the time spent per op kind")
      ->group(kDevice);
  app.add_option("--trace", options.tracePath,
                 "Write the measured timeline (a row per rank for compute and "
                 "one for communication) as a Chrome trace")
      ->group(kDevice);
  app.add_option("--nproc", options.nproc,
                 "Processes (ranks) to start on this node")
      ->capture_default_str()
      ->group(kLaunch);
  app.add_option("--nnodes", options.nnodes, "Nodes taking part")
      ->capture_default_str()
      ->group(kLaunch);
  app.add_option("--node-rank", options.nodeRank, "This node's index")
      ->capture_default_str()
      ->group(kLaunch);
  app.add_option("--rendezvous", options.rendezvousDir,
                 "Directory the ranks meet in (shared by all nodes; default: "
                 "a fresh temporary one)")
      ->group(kLaunch);
  app.add_option("--master-addr", options.masterAddr,
                 "Address of node 0, whose launcher serves the rendezvous "
                 "store")
      ->capture_default_str()
      ->group(kLaunch);
  app.add_option("--master-port", options.masterPort,
                 "Port of the rendezvous store on node 0 (0: a directory "
                 "store)")
      ->capture_default_str()
      ->group(kLaunch);
  app.add_option("--host", options.hostname,
                 "Address this node's ranks listen on")
      ->capture_default_str()
      ->group(kLaunch);
  app.add_option("--timeout", options.timeoutSeconds,
                 "Seconds a collective may wait before the rank fails (a dead "
                 "or hung rank fails the job within this bound)")
      ->capture_default_str()
      ->group(kLaunch);
  app.add_option("--job-token-file", options.jobTokenFile,
                 "File whose first line is the job's secret for the TCP store "
                 "(the same on every node; TRELLIS_JOB_TOKEN instead; "
                 "without either, a single node makes one)")
      ->group(kLaunch);
  double maxMemoryMiB = 0;
  app.add_option("--max-memory", maxMemoryMiB,
                 "MiB this rank may allocate (0: the memory available, "
                 "shared by the node's ranks); a plan that needs more is "
                 "refused before it allocates")
      ->capture_default_str()
      ->group(kDevice);
  app.add_option("--on-nonfinite", options.onNonfinite,
                 "A step whose loss or updated parameters are not finite: "
                 "stop (name the step and the first such tensor; nothing of "
                 "it is saved), skip (drop its update: updates are kept "
                 "apart from the parameters, which costs their memory "
                 "again), continue")
      ->capture_default_str()
      ->group(kFaults);
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
  } catch (const CLI::ConversionError &error) {
    // CLI11 says "Could not convert: --steps = many".
    std::string text = error.what();
    size_t colon = text.find(": "), equals = text.find(" = ");
    if (colon != std::string::npos && equals != std::string::npos &&
        equals > colon) {
      std::string name = text.substr(colon + 2, equals - colon - 2);
      const CLI::Option *option = app.get_option_no_throw(name);
      bool flag = option && option->get_type_name() == "BOOLEAN";
      text = std::string("expected ") + (flag ? "true or false" : "a number") +
             " for " + name + ", found '" + text.substr(equals + 3) + "'";
    }
    std::fprintf(stderr, "trellis run: error: %s (see 'trellis run --help')\n",
                 text.c_str());
    return 1;
  } catch (const CLI::ParseError &error) {
    std::fprintf(stderr, "trellis run: error: %s (see 'trellis run --help')\n",
                 error.what());
    return 1;
  }
  options.maxMemoryBytes = static_cast<int64_t>(maxMemoryMiB * 1048576.0);
  if (!(maxMemoryMiB >= 0) || maxMemoryMiB > 1e12) {
    std::fprintf(stderr,
                 "trellis run: error: expected --max-memory MiB >= 0, found "
                 "%g\n",
                 maxMemoryMiB);
    return 1;
  }
  options.command.assign(argv, argv + argc);
  return trellis::runtime::runTrainingCommand(options);
}
