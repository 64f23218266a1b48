//===- RunCommand.cpp - `trellis run` -------------------------------------===//
//
// Trains a compiled plan on this machine's CPU.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "trellis/Runtime/Trainer.h"

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand runCommand("run", "Train a compiled plan");

namespace {
cl::opt<std::string> runPlan(cl::Positional, cl::desc("<plan>"), cl::Required,
                             cl::sub(runCommand));
cl::opt<int64_t> runSteps("steps", cl::desc("Training steps to run"),
                          cl::init(10), cl::sub(runCommand));
cl::opt<uint64_t> runSeed("seed", cl::desc("Seed of initialization and data"),
                          cl::init(0), cl::sub(runCommand));
cl::opt<std::string> runData(
    "data",
    cl::desc("synthetic (default), repeat (one batch, to overfit), or a "
             "binary token file"),
    cl::init("synthetic"), cl::sub(runCommand));
cl::opt<std::string> runDataDtype("data-dtype",
                                  cl::desc("Token file element type: uint16 "
                                           "or uint32"),
                                  cl::init("uint16"), cl::sub(runCommand));
cl::opt<std::string> runSave("save",
                             cl::desc("Write a checkpoint here at the end"),
                             cl::value_desc("dir"), cl::sub(runCommand));
cl::opt<std::string> runLoad("load", cl::desc("Resume from this checkpoint"),
                             cl::value_desc("dir"), cl::sub(runCommand));
cl::opt<std::string>
    runWeights("weights",
               cl::desc("Initial weights: a Hugging Face .safetensors file"),
               cl::value_desc("file"), cl::sub(runCommand));
cl::opt<int> runThreads("threads", cl::desc("BLAS threads"), cl::init(1),
                        cl::sub(runCommand));
cl::opt<int64_t> runLogEvery("log-every",
                             cl::desc("Print every N steps (default 1)"),
                             cl::init(1), cl::sub(runCommand));
cl::opt<int64_t> runNproc("nproc",
                          cl::desc("Processes (ranks) to start on this node"),
                          cl::init(1), cl::sub(runCommand));
cl::opt<int64_t> runNnodes("nnodes", cl::desc("Nodes taking part"), cl::init(1),
                           cl::sub(runCommand));
cl::opt<int64_t> runNodeRank("node-rank", cl::desc("This node's index"),
                             cl::init(0), cl::sub(runCommand));
cl::opt<std::string> runRendezvous(
    "rendezvous",
    cl::desc("Directory the ranks meet in (shared by all nodes; default: a "
             "fresh temporary one)"),
    cl::value_desc("dir"), cl::sub(runCommand));
cl::opt<std::string> runMasterAddr(
    "master-addr",
    cl::desc("Address of node 0, whose launcher serves the rendezvous store"),
    cl::init("127.0.0.1"), cl::sub(runCommand));
cl::opt<int> runMasterPort(
    "master-port",
    cl::desc("Port of the rendezvous store on node 0 (0: a directory store)"),
    cl::init(0), cl::sub(runCommand));
cl::opt<std::string> runHost("host",
                             cl::desc("Address this node's ranks listen on"),
                             cl::init("127.0.0.1"), cl::sub(runCommand));
cl::opt<double> runTimeout(
    "timeout",
    cl::desc("Seconds a collective may wait before the rank fails (a dead or "
             "hung rank fails the job within this bound)"),
    cl::init(60), cl::sub(runCommand));
cl::opt<int64_t> runRank("rank",
                         cl::desc("Global rank of this process (set "
                                  "by the launcher)"),
                         cl::init(-1), cl::Hidden, cl::sub(runCommand));
cl::opt<std::string>
    runInjectFault("inject-fault",
                   cl::desc("Testing: crash:RANK:STEP or hang:RANK:STEP"),
                   cl::Hidden, cl::sub(runCommand));
cl::opt<bool> runProfile("profile",
                         cl::desc("Print the time spent per op kind"),
                         cl::sub(runCommand));
cl::opt<std::string> runTrace(
    "trace",
    cl::desc("Write the measured timeline (a row per rank for compute and "
             "one for communication) as a Chrome trace"),
    cl::value_desc("file.json"), cl::sub(runCommand));
} // namespace

int runRunCommand() {
  runtime::TrainOptions options;
  options.planPath = runPlan;
  options.steps = runSteps;
  options.seed = runSeed;
  options.data = runData;
  options.dataDtype = runDataDtype;
  options.saveDir = runSave;
  options.loadDir = runLoad;
  options.weightsPath = runWeights;
  options.threads = runThreads;
  options.logEvery = std::max<int64_t>(1, runLogEvery);
  options.profile = runProfile;
  options.tracePath = runTrace;
  options.nproc = runNproc;
  options.nnodes = runNnodes;
  options.nodeRank = runNodeRank;
  options.rank = runRank;
  options.rendezvousDir = runRendezvous;
  options.hostname = runHost;
  options.masterAddr = runMasterAddr;
  options.masterPort = runMasterPort;
  options.timeoutSeconds = runTimeout;
  options.injectFault = runInjectFault;
  options.command = commandLine();
  return runtime::runTrainingCommand(options);
}

} // namespace trellis::driver
