#include "launcher/OutputLock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/Error.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

void requireDirectoryOrAbsent(const std::string& dir, const std::string& key) {
  std::error_code ec;
  SLUICE_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), ConfigError,
               "config error: " << key << " '" << dir << "' is a file, not a directory; give a directory");
}

}  // namespace

OutputLock::OutputLock(const std::string& dir, const std::string& key) : dir_(dir) {
  requireDirectoryOrAbsent(dir, key);
  std::error_code ec;
  created_ = fs::create_directories(dir, ec);
  SLUICE_CHECK(!ec, ConfigError, "config error: cannot create " << key << " '" << dir << "': " << ec.message());
  // On a failure below: let go of the file, remove what this lock made, throw.
  auto fail = [&](const std::string& why) {
    fd_.reset();
    removeIfUnused();
    throw ConfigError("config error: " + why);
  };
  const std::string path = (fs::path(dir) / ".sluice.lock").string();
  fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_.valid()) fail(key + " '" + dir + "' is not writable: " + std::strerror(errno));
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) fail("cannot lock " + key + " '" + dir + "': " + std::strerror(err));
    char holder[256] = {};
    const ssize_t n = ::pread(fd_.get(), holder, sizeof(holder) - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    fail(key + " '" + dir + "' is in use by another sluice job (" + (who.empty() ? "holder unknown" : who) +
         "); give this job another " + key + ", or wait for that one to end");
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + host + "\n";
  if (::ftruncate(fd_.get(), 0) != 0 || ::pwrite(fd_.get(), me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    fail(key + " '" + dir + "' is not writable: " + std::strerror(errno));
  }
}

OutputLock::~OutputLock() {
  fd_.reset();
  removeIfUnused();
}

// A directory this lock created and nothing else wrote to goes again, so a
// job that fails before writing anything leaves nothing behind.
void OutputLock::removeIfUnused() noexcept {
  if (!created_) return;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().filename() != ".sluice.lock") return;
  }
  if (ec) return;
  fs::remove(fs::path(dir_) / ".sluice.lock", ec);
  fs::remove(dir_, ec);
}

std::vector<std::unique_ptr<OutputLock>> lockJobOutputs(const Config& config) {
  std::vector<std::unique_ptr<OutputLock>> locks;
  locks.push_back(std::make_unique<OutputLock>(config.job.outputDir, "job.output_dir"));
  if (config.checkpoint.interval > 0) {
    const auto out = fs::weakly_canonical(config.job.outputDir);
    const auto ck = fs::weakly_canonical(config.checkpointDir());
    // Inside the output directory: covered by its lock; only checked.
    const bool inside = std::mismatch(out.begin(), out.end(), ck.begin(), ck.end()).first == out.end();
    if (inside) {
      requireDirectoryOrAbsent(config.checkpointDir(), "checkpoint.dir");
    } else {
      locks.push_back(std::make_unique<OutputLock>(config.checkpointDir(), "checkpoint.dir"));
    }
  }
  return locks;
}

}  // namespace sluice
