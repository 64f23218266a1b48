//===- Launcher.cpp - One process per rank --------------------------------===//

#include "trellis/Runtime/Launcher.h"

#include "trellis/Runtime/Trainer.h"

#include "../gloo/TcpStore.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

extern char **environ;

namespace trellis::runtime {

namespace {

std::string describeExit(int status) {
  if (WIFEXITED(status))
    return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

bool succeeded(int status) {
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/// The environment variable that tells a rank its launcher's pid.
constexpr const char *kLauncherPidVariable = "TRELLIS_LAUNCHER_PID";

/// The ranks a signal handler passes SIGINT and SIGTERM to (fixed-size:
/// the handler may not allocate).
constexpr int kMaxForwarded = 4096;
pid_t launched[kMaxForwarded];
volatile sig_atomic_t launchedCount = 0;
volatile sig_atomic_t receivedSignal = 0;

void forwardSignal(int signal) {
  receivedSignal = signal;
  for (sig_atomic_t i = 0; i < launchedCount; ++i)
    kill(launched[i], signal);
}

} // namespace

Status bindRankToLauncher() {
  const char *launcher = std::getenv(kLauncherPidVariable);
  if (!launcher)
    return Status::success();
  // Killed with the launcher, however it dies; and if it died before this
  // line, no orphan trains on.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (std::to_string(getppid()) != launcher)
    return Status::error("the launcher (pid " + std::string(launcher) +
                         ") is gone: not training without it");
  return Status::success();
}

int launchRanks(const TrainOptions &options, const Mesh &mesh) {
  auto fail = [](const std::string &message) {
    std::fprintf(stderr, "trellis run: error: %s\n", message.c_str());
    return 1;
  };
  if (options.nproc < 1 || options.nnodes < 1 || options.nodeRank < 0 ||
      options.nodeRank >= options.nnodes)
    return fail("expected --nproc >= 1, --nnodes >= 1 and --node-rank in [0, "
                "--nnodes), found " +
                std::to_string(options.nproc) + ", " +
                std::to_string(options.nnodes) + " and " +
                std::to_string(options.nodeRank));
  int64_t world = options.nproc * options.nnodes;
  if (mesh.size() != world)
    return fail("the plan's mesh " + mesh.toString() + " has " +
                std::to_string(mesh.size()) + " ranks but --nproc " +
                std::to_string(options.nproc) + " x --nnodes " +
                std::to_string(options.nnodes) + " start " +
                std::to_string(world));
  // Node 0's launcher serves the TCP store when a master port is given.
  std::unique_ptr<TcpStoreServer> server;
  if (options.masterPort > 0 && options.nodeRank == 0) {
    StatusOr<std::unique_ptr<TcpStoreServer>> started =
        TcpStoreServer::start(options.masterAddr, options.masterPort);
    if (!started.ok())
      return fail(started.status().message());
    server = std::move(*started);
  }
  std::string store = options.rendezvousDir;
  bool temporary = store.empty() && options.masterPort == 0;
  if (temporary) {
    if (options.nnodes > 1)
      return fail("--nnodes > 1 needs --master-addr and --master-port (a "
                  "store served by node 0), or --rendezvous DIR on a "
                  "filesystem every node shares");
    char pattern[] = "/tmp/trellis-rendezvous-XXXXXX";
    if (!mkdtemp(pattern))
      return fail(std::string("cannot create a rendezvous directory: ") +
                  std::strerror(errno));
    store = pattern;
  }

  // The ranks' OpenMP threads (oneDNN) sleep while the serial kernels run
  // instead of spinning on the same cores, unless the user chose a policy.
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
  // Ranks die with this process (bindRankToLauncher).
  setenv(kLauncherPidVariable, std::to_string(getpid()).c_str(), 1);
  std::map<pid_t, int64_t> children;
  for (int64_t local = 0; local < options.nproc; ++local) {
    int64_t rank = options.nodeRank * options.nproc + local;
    std::vector<std::string> args = options.command;
    args.push_back("--rank=" + std::to_string(rank));
    if (!store.empty())
      args.push_back("--rendezvous=" + store);
    std::vector<char *> argv;
    for (std::string &arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // Rank 0 speaks for the job; the others report errors only.
    if (rank != 0)
      posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                       O_WRONLY, 0);
    // Ranks take SIGINT and SIGTERM by default, even where this process
    // started with them ignored (a non-interactive shell's background job).
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int error = posix_spawn(&pid, "/proc/self/exe", &actions, &attributes,
                            argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (error != 0) {
      for (auto &[child, r] : children)
        kill(child, SIGKILL);
      return fail("cannot start rank " + std::to_string(rank) + ": " +
                  std::strerror(error));
    }
    children[pid] = rank;
    if (launchedCount < kMaxForwarded)
      launched[launchedCount++] = pid;
  }
  // SIGINT and SIGTERM reach every rank; the launcher waits for them and
  // exits with the signal named.
  struct sigaction forward = {};
  forward.sa_handler = forwardSignal;
  sigemptyset(&forward.sa_mask);
  sigaction(SIGINT, &forward, nullptr);
  sigaction(SIGTERM, &forward, nullptr);

  // Wait; after the first failure the others get the collective timeout
  // (plus a margin) to notice and exit, then are killed.
  using Clock = std::chrono::steady_clock;
  std::vector<std::string> failures;
  std::optional<Clock::time_point> deadline;
  while (!children.empty()) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, deadline ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid > 0) {
      int64_t rank = children[pid];
      children.erase(pid);
      if (!succeeded(status)) {
        failures.push_back("rank " + std::to_string(rank) + " " +
                           describeExit(status));
        if (!deadline)
          deadline =
              Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(
                                 options.timeoutSeconds * 1000 + 5000));
      }
      continue;
    }
    if (deadline && Clock::now() > *deadline) {
      for (auto &[child, rank] : children) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        failures.push_back("rank " + std::to_string(rank) +
                           " did not exit within the timeout and was killed");
      }
      children.clear();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (temporary) {
    std::error_code ignored;
    std::filesystem::remove_all(store, ignored);
  }
  if (int signal = receivedSignal)
    failures.insert(failures.begin(),
                    std::string("the launcher received ") + strsignal(signal) +
                        " and passed it to every rank");
  if (failures.empty())
    return 0;
  std::string message = failures[0];
  for (size_t i = 1; i < failures.size(); ++i)
    message += "; " + failures[i];
  return fail(message);
}

} // namespace trellis::runtime
