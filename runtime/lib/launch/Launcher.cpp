//===- Launcher.cpp - One process per rank --------------------------------===//

#include "trellis/Runtime/Launcher.h"

#include "trellis/Runtime/Rendezvous.h"

#include "trellis/Common/FileKind.h"
#include "trellis/Runtime/Trainer.h"

#include <algorithm>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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

/// 32 random bytes as 64 hexadecimal digits.
StatusOr<std::string> randomToken() {
  unsigned char bytes[32];
  if (getentropy(bytes, sizeof(bytes)) != 0)
    return Status::error(std::string("cannot make a job token: ") +
                         std::strerror(errno));
  std::string token;
  for (unsigned char byte : bytes) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", byte);
    token += hex;
  }
  return token;
}

/// Forks a process, detached from this one (it is not our child: waitpid
/// never sees it), that waits until this process is gone, however it dies,
/// then removes `directory`. Precondition: no other thread runs (the
/// reaper allocates after fork).
Status removeWhenGone(const std::string &directory) {
  int lifeline[2];
  if (pipe2(lifeline, O_CLOEXEC) != 0)
    return Status::error(std::string("cannot watch the rendezvous "
                                     "directory: pipe: ") +
                         std::strerror(errno));
  pid_t middle = fork();
  if (middle < 0) {
    close(lifeline[0]);
    close(lifeline[1]);
    return Status::error(std::string("cannot watch the rendezvous "
                                     "directory: fork: ") +
                         std::strerror(errno));
  }
  if (middle == 0) {
    // The middle process forks the reaper and exits, so the reaper is
    // reparented away from the launcher.
    if (fork() != 0)
      _exit(0);
    close(lifeline[1]);
    setsid(); // not in the launcher's process group: a Ctrl-C spares it
    prctl(PR_SET_NAME, "trellis-reaper");
    char byte;
    // EOF once the launcher's end closes: the launcher exited or died.
    while (read(lifeline[0], &byte, 1) < 0 && errno == EINTR) {
    }
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
    _exit(0);
  }
  close(lifeline[0]);
  int status = 0;
  while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  // lifeline[1] stays open (close-on-exec: no rank holds it) until this
  // process ends.
  return Status::success();
}

} // namespace

StatusOr<std::string> resolveJobToken(const TrainOptions &options) {
  if (const char *given = std::getenv(kJobTokenVariable); given && *given) {
    size_t length = std::strlen(given);
    if (length < 16 || length > 256)
      return Status::error(std::string(kJobTokenVariable) +
                           " holds a secret of " + std::to_string(length) +
                           " characters, expected 16 to 256 (e.g. head -c 32 "
                           "/dev/urandom | od -An -tx1 | tr -d ' \\n')");
    return std::string(given);
  }
  if (!options.jobTokenFile.empty()) {
    // A secret others can read is no secret: say so (as ssh does of keys).
    struct stat info;
    if (stat(options.jobTokenFile.c_str(), &info) == 0 &&
        (info.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%03o",
                    static_cast<unsigned>(info.st_mode & 0777));
      std::fprintf(stderr,
                   "trellis run: warning: --job-token-file '%s' is readable "
                   "by others (mode %s): whoever reads it can join the job; "
                   "chmod 600 it\n",
                   options.jobTokenFile.c_str(), mode);
    }
    std::string contents;
    // A secret of a few dozen bytes; 64 KiB is ample.
    if (std::string why =
            readRegularFile(options.jobTokenFile, contents, int64_t(64) << 10);
        !why.empty())
      return Status::error("--job-token-file: '" + options.jobTokenFile +
                           "' " + why + ", expected a file holding the job's "
                           "secret");
    std::string token = contents.substr(0, contents.find_first_of("\r\n"));
    if (token.size() < 16 || token.size() > 256)
      return Status::error("--job-token-file: '" + options.jobTokenFile +
                           "' holds a secret of " +
                           std::to_string(token.size()) +
                           " characters, expected 16 to 256 on its first "
                           "line (e.g. head -c 32 /dev/urandom | od -An -tx1 "
                           "| tr -d ' \\n' > FILE)");
    return token;
  }
  if (options.nnodes > 1 && options.masterPort > 0)
    return Status::error(
        "a TCP rendezvous over several nodes needs the job's secret on every "
        "node: --job-token-file FILE (the same file everywhere) or " +
        std::string(kJobTokenVariable));
  return randomToken();
}

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

/// How long the other ranks have to exit after the first failure before
/// they count as hung (a hung rank fails the job within --timeout and
/// this).
constexpr std::chrono::milliseconds kExitGrace{1000};

int launchRanks(const TrainOptions &options, const Mesh &mesh) {
  auto fail = [](const std::string &message) {
    std::fprintf(stderr, "trellis run: error: %s\n", message.c_str());
    return 1;
  };
  // validateTrainOptions checked the counts.
  int64_t world = options.nproc * options.nnodes;
  if (mesh.size() != world)
    return fail("the plan's mesh " + mesh.toString() + " has " +
                std::to_string(mesh.size()) + " ranks but --nproc " +
                std::to_string(options.nproc) + " x --nnodes " +
                std::to_string(options.nnodes) + " start " +
                std::to_string(world));
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
    // Removed even if this launcher is SIGKILLed (before any thread starts:
    // the reaper is forked).
    if (Status watched = removeWhenGone(store); !watched.ok()) {
      std::filesystem::remove_all(store);
      return fail(watched.message());
    }
  }

  // Node 0's launcher serves the TCP store when a master port is given;
  // every connection to it presents the job's secret, which the ranks
  // find in their environment.
  std::unique_ptr<TcpStoreServer> server;
  if (options.masterPort > 0) {
    StatusOr<std::string> token = resolveJobToken(options);
    if (!token.ok())
      return fail(token.status().message());
    setenv(kJobTokenVariable, token->c_str(), 1);
  }
  if (options.masterPort > 0 && options.nodeRank == 0) {
    StatusOr<std::unique_ptr<TcpStoreServer>> started = TcpStoreServer::start(
        options.masterAddr, options.masterPort, std::getenv(kJobTokenVariable));
    if (!started.ok())
      return fail(started.status().message());
    server = std::move(*started);
  }
  // Ranks sharing this node's cores: their idle OpenMP threads sleep
  // instead of spinning on cores another rank needs, unless the user chose
  // a policy. A single rank keeps libgomp's default (spin briefly, then
  // sleep): waking a sleeping thread costs each short kernel more than its
  // second thread gains (runtime/cpu/README.md).
  if (options.nproc > 1)
    setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
  // Ranks die with this process (bindRankToLauncher).
  setenv(kLauncherPidVariable, std::to_string(getpid()).c_str(), 1);
  std::map<pid_t, int64_t> children;
  for (int64_t local = 0; local < options.nproc; ++local) {
    int64_t rank = options.nodeRank * options.nproc + local;
    std::vector<std::string> args = options.command;
    args.push_back("--rank=" + std::to_string(rank));
    // A directory given by the user is in the command already.
    if (temporary)
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

  // Wait. A failed rank's sockets close when it exits, so the ranks
  // waiting on it fail at once; one still running a moment after the
  // first failure is hung (or in work that waits on no failed rank): it is
  // killed, and named first. The fate line orders by cause, not by arrival
  // (below).
  using Clock = std::chrono::steady_clock;
  // Each failure with its place in the fate line: ranks killed by a
  // signal (0: a crash, the kernel's OOM killer, a kill) come before ranks
  // that exited with an error (1), which may be their peers' reaction to
  // the loss (a closed socket); each group in the order the exits arrived.
  std::vector<std::pair<int, std::string>> failures;
  std::vector<std::string> unresponsive;
  std::optional<Clock::time_point> deadline;
  int64_t firstFailed = -1;
  while (!children.empty()) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, deadline ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid > 0) {
      int64_t rank = children[pid];
      children.erase(pid);
      if (!succeeded(status)) {
        failures.emplace_back(WIFSIGNALED(status) ? 0 : 1,
                              "rank " + std::to_string(rank) + " " +
                                  describeExit(status));
        if (!deadline) {
          deadline = Clock::now() + kExitGrace;
          firstFailed = rank;
        }
      }
      continue;
    }
    if (deadline && Clock::now() > *deadline) {
      for (auto &[child, rank] : children) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        unresponsive.push_back(
            "rank " + std::to_string(rank) + " stopped responding: it was " +
            "still running " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    kExitGrace)
                    .count()) +
            " ms after rank " + std::to_string(firstFailed) +
            " failed, and was killed");
      }
      children.clear();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::stable_sort(
      failures.begin(), failures.end(),
      [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<std::string> fates = unresponsive;
  for (auto &[rankClass, text] : failures)
    fates.push_back(std::move(text));
  if (temporary) {
    std::error_code ignored;
    std::filesystem::remove_all(store, ignored);
  }
  if (int signal = receivedSignal)
    fates.insert(fates.begin(), std::string("the launcher received ") +
                                    strsignal(signal) +
                                    " and passed it to every rank");
  if (fates.empty())
    return 0;
  std::string message = fates[0];
  for (size_t i = 1; i < fates.size(); ++i)
    message += "; " + fates[i];
  return fail(message);
}

} // namespace trellis::runtime
