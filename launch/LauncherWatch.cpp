#include "launch/LauncherWatch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/Error.h"
#include "core/Files.h"

namespace sluice {
namespace {

int parentOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 1));
  std::string state;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

std::atomic<int> watchedFd{-1};  // the launcher's pidfd, once watched

std::string ranksLockPath(const std::string& dir) { return (std::filesystem::path(dir) / ".sluice.ranks").string(); }

}  // namespace

void exitIfLauncherGone() {
  const int fd = watchedFd.load();
  if (fd < 0) return;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0) std::_Exit(kLauncherDiedExit);
}

bool isAncestor(int pid) {
  if (pid <= 1) return false;
  for (int p = ::getppid(), hops = 0; p > 1 && hops < 64; p = parentOf(p), ++hops) {
    if (p == pid) return true;
  }
  return false;
}

bool watchLauncher() {
  const char* pidText = std::getenv(kLauncherPidEnv);
  const char* host = std::getenv(kLauncherHostEnv);
  if (!pidText) return false;
  char me[256] = {};
  ::gethostname(me, sizeof(me) - 1);
  if (host && std::string(host) != me) return false;  // a rank on another machine
  const int pid = std::atoi(pidText);
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0 && errno == ESRCH) std::_Exit(kLauncherDiedExit);  // the launcher is gone already
  // Checked with the pidfd open (the pid cannot be reused while it is held).
  // Not an ancestor: a rank another daemon started (srun's tasks are
  // slurmstepd's children, also on the launcher's machine): not watched here,
  // it ends with that daemon's step.
  if (!isAncestor(pid)) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  if (fd < 0) {  // no pidfd (a kernel before 5.3): the ancestry is polled
    std::thread([pid] {
      while (isAncestor(pid)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::_Exit(kLauncherDiedExit);
    }).detach();
    return true;
  }
  watchedFd = fd;
  std::thread([fd] {
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    std::_Exit(kLauncherDiedExit);  // the launcher is gone: write nothing more
  }).detach();
  return true;
}

void holdRanksLock(const std::string& dir) {
  const std::string path = ranksLockPath(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    ::close(fd);
    return;
  }
  // Held (fd left open) until the process ends, however it ends.
}

void waitForEarlierRanks(const std::string& dir, double seconds) {
  const std::string path = ranksLockPath(dir);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  SLUICE_CHECK(fd.valid(), ConfigError, "config error: job.output_dir '" << dir << "' is not writable: "
                                                                          << std::strerror(errno));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    SLUICE_CHECK(errno == EWOULDBLOCK, ConfigError,
                 "config error: cannot lock " << path << ": " << std::strerror(errno));
    SLUICE_CHECK(std::chrono::steady_clock::now() < deadline, ConfigError,
                 "config error: job.output_dir '" << dir << "': ranks of an earlier job still run there " << seconds
                     << " s after it ended (they hold " << path << "); end them (e.g. pkill -f 'sluice worker') "
                     << "before starting another job there");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Released when fd closes: this job's own ranks take it shared.
}

}  // namespace sluice
