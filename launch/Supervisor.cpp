#include "launch/Supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <regex>
#include <vector>

#include "core/Error.h"
#include "launch/LauncherWatch.h"
#include "core/Files.h"

namespace sluice {
namespace {

volatile sig_atomic_t childPid = 0;
volatile sig_atomic_t stopRequested = 0;
volatile sig_atomic_t ranksReady = 1;  // every rank can take a stop (SupervisedJob::ranks)

void onStopSignal(int) {
  stopRequested = 1;
  if (childPid > 0 && ranksReady) ::kill(childPid, SIGUSR1);
}

// SIGUSR2: the ranks print their metrics report and go on (mpirun forwards it).
void onReportSignal(int) {
  if (childPid > 0) ::kill(childPid, SIGUSR2);
}

bool isDashes(const std::string& line) {
  return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos;
}

// Words of Open MPI's help blocks that only follow a failure.
bool isFailureBlock(const std::vector<std::string>& block) {
  static const char* words[] = {"MPI_ABORT", "non-zero status", "non-zero exit", "exited on signal", "terminated normally",
                                "noticed that", "aborted", "mpiexec has exited", "unexpectedly disconnected"};
  for (auto& l : block) {
    for (auto* w : words) {
      if (l.find(w) != std::string::npos) return true;
    }
  }
  return false;
}

struct Run {
  int exitCode = 0;
  bool signaled = false;
  bool stoppedEarly = false;  // the ranks said they stopped on request (and checkpointed)
  std::string cause;
};

// The job's stderr, line by line: rank-ready lines counted, the root cause
// kept for the end, Open MPI's failure blocks and noise dropped, the rest
// passed on.
class StderrFilter {
 public:
  StderrFilter(Run& run, pid_t pid, int ranks) : run_(run), pid_(pid), ranks_(ranks) {}
  void add(const std::string& line) {
    if (line == kRankReadyLine) {
      if (++ready_ == ranks_) {
        ranksReady = 1;
        if (stopRequested) ::kill(pid_, SIGUSR1);  // held until every rank could take it
      }
      return;
    }
    if (line.find("stopped on request after step") != std::string::npos) run_.stoppedEarly = true;
    // The first failing rank's own line is printed once, at the end, as the
    // root cause; other ranks failing with the same message are not repeated.
    static const std::string failedMark = "error: this rank failed: ";
    const auto failedAt = line.find(failedMark);
    const std::string message = failedAt == std::string::npos ? "" : line.substr(failedAt + failedMark.size());
    if (run_.cause.empty()) {
      run_.cause = rootCauseOf(line);
      if (!run_.cause.empty() && !message.empty()) {
        causeMessage_ = message;
        return;
      }
    } else if (!message.empty() && message == causeMessage_) {
      return;
    }
    if (isDashes(line)) {
      if (!inBlock_) {
        inBlock_ = true;
        block_ = {line};
        return;
      }
      block_.push_back(line);
      inBlock_ = false;
      if (!isFailureBlock(block_)) {
        for (auto& l : block_) std::cerr << l << "\n";
      }
      block_.clear();
      return;
    }
    if (inBlock_) {
      block_.push_back(line);
      return;
    }
    if (!isLauncherNoise(line, false)) std::cerr << line << std::endl;
  }
  void finish() {
    for (auto& l : block_) std::cerr << l << "\n";  // an unterminated block
  }

 private:
  Run& run_;
  pid_t pid_;
  int ranks_, ready_ = 0;
  std::vector<std::string> block_;
  bool inBlock_ = false;
  std::string causeMessage_;
};

// The child: mpirun (or srun) with the plan's environment, its stderr into the pipe.
[[noreturn]] void execPlan(const LaunchPlan& plan, int restart, pid_t parent, const int fds[2]) {
  // Note [no orphans]: the job dies with its launcher. If `sluice train`
  // is killed (even by SIGKILL), mpirun gets SIGTERM and ends the ranks
  // at once instead of training on unsupervised. It runs in its own process
  // group, so a Ctrl-C at the terminal reaches the launcher only, which
  // turns it into the same orderly stop as SIGTERM (SIGUSR1 to the ranks:
  // a checkpoint when checkpointing is on).
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) std::_Exit(143);  // the launcher died before prctl
  ::setpgid(0, 0);
  ::dup2(fds[1], STDERR_FILENO);
  ::close(fds[0]);
  ::close(fds[1]);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGUSR1, SIG_DFL);
  signal(SIGUSR2, SIG_DFL);
  for (auto& [k, v] : plan.env) setenv(k.c_str(), v.c_str(), 1);
  setenv("RESTART_COUNT", std::to_string(restart).c_str(), 1);
  // The ranks watch this launcher and end the moment it dies (launch/LauncherWatch.h).
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  setenv(kLauncherPidEnv, std::to_string(parent).c_str(), 1);
  setenv(kLauncherHostEnv, host, 1);
  std::vector<char*> args;
  for (auto& a : plan.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "sluice: cannot start %s: %s (install openmpi-bin, or run scripts/setup.sh)\n",
               plan.argv[0].c_str(), std::strerror(errno));
  std::_Exit(127);
}

// Runs the plan once; its stderr goes through the filter.
Run runOnce(const LaunchPlan& plan, int restart, int ranks) {
  ranksReady = ranks > 0 ? 0 : 1;
  int fds[2];
  SLUICE_CHECK(::pipe2(fds, O_CLOEXEC) == 0, Error, "cannot create a pipe: " << std::strerror(errno));
  UniqueFd readEnd(fds[0]), writeEnd(fds[1]);  // the child's copies are its own (dup2 clears CLOEXEC on stderr)
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  SLUICE_CHECK(pid >= 0, Error, "cannot fork: " << std::strerror(errno));
  if (pid == 0) execPlan(plan, restart, parent, fds);
  childPid = pid;
  writeEnd.reset();
  if (stopRequested && ranksReady) ::kill(pid, SIGUSR1);  // a stop asked for before the job started
  Run run;
  StderrFilter filter(run, pid, ranks);
  std::string pending;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(readEnd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      filter.add(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) filter.add(pending);
  filter.finish();
  readEnd.reset();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  childPid = 0;
  if (WIFSIGNALED(status)) {
    run.signaled = true;
    run.exitCode = 128 + WTERMSIG(status);
  } else {
    run.exitCode = WEXITSTATUS(status);
  }
  return run;
}

}  // namespace

bool isLauncherNoise(const std::string& line, bool inHelpBlock) {
  if (inHelpBlock) return true;
  static const char* words[] = {"ORTE_ERROR_LOG", "PMIX ERROR", "mpirun noticed", "mpiexec noticed",
                                "mpirun: Forwarding signal", "srun: error:", "srun: Job step aborted",
                                "srun: forcing job termination", "slurmstepd: error: ***", "srun: launch/slurm:",
                                "srun: Terminating StepId", "srun: got SIGCONT", "srun: sending Ctrl-C",
                                "to see all help / error messages",
                                "Primary job  terminated normally", "Primary job terminated normally"};
  for (auto* w : words) {
    if (line.find(w) != std::string::npos) return true;
  }
  return false;
}

std::string rootCauseOf(const std::string& line) {
  static const std::regex failed(R"(\[rank (\d+)( on [^\]]+)?\] error: this rank failed: (.*))");
  static const std::regex died(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+) \(([^)]*)\))");
  // srun: "srun: error: h2: task 3: Killed" (the first to fail; later ones say Terminated or Killed too).
  static const std::regex srunTask(R"(srun: error: (\S+): tasks? (\d+)[-,\d]*: (.*))");
  std::smatch m;
  if (std::regex_search(line, m, failed)) return "rank " + m[1].str() + m[2].str() + ": " + m[3].str();
  if (std::regex_search(line, m, died)) {
    return "rank " + m[1].str() + " on " + m[2].str() + " died on signal " + m[3].str() + " (" + m[4].str() + ")";
  }
  if (std::regex_search(line, m, srunTask)) {
    return "rank " + m[2].str() + " on " + m[1].str() + ": " + m[3].str();
  }
  return "";
}

void catchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);  // Ctrl-C: the same orderly stop (Note [no orphans])
  sigaction(SIGUSR1, &sa, nullptr);
  struct sigaction report {};
  report.sa_handler = onReportSignal;
  sigemptyset(&report.sa_mask);
  sigaction(SIGUSR2, &report, nullptr);
}

bool stopCaught() { return stopRequested != 0; }

int superviseJob(const SupervisedJob& job) {
  catchStopSignals();
  if (stopRequested) {
    std::cerr << "sluice: stopped on request before the job started; nothing was run" << std::endl;
    return 0;
  }
  for (int restart = 0;; ++restart) {
    const Run run = runOnce(job.plan, restart, job.ranks);
    if (run.exitCode == 0) {
      if (run.stoppedEarly) {
        std::cerr << "sluice: stopped on request after writing a checkpoint; resume with: " << job.resumeHint
                  << std::endl;
      }
      return 0;
    }
    const std::string cause =
        run.cause.empty() ? "the launcher exited with code " + std::to_string(run.exitCode) : run.cause;
    if (run.exitCode == 2 && !run.signaled) {  // a bad config: another run would fail the same way
      std::cerr << "sluice: the job failed: " << cause << std::endl;
      return 2;
    }
    if (stopRequested) {
      std::cerr << "sluice: asked to stop, but the job ended with code " << run.exitCode
                << " before it could write a checkpoint (did the signal reach mpirun and the ranks too? send it to "
                << "this process alone): " << cause << std::endl;
      return 1;
    }
    if (restart >= job.maxRestarts) {
      std::cerr << "sluice: the job failed: " << cause
                << (job.maxRestarts > 0 ? " (after " + std::to_string(restart) + " restarts)" : "") << std::endl;
      return 1;
    }
    std::cerr << "sluice: restart " << restart + 1 << " of " << job.maxRestarts << " from the latest checkpoint after: "
              << cause << std::endl;
  }
}

}  // namespace sluice
