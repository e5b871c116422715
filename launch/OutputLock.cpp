#include "launch/OutputLock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/Error.h"
#include "launch/LauncherWatch.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

// "pid P on host H", as the holder of a lock file wrote it.
std::string holderOf(const fs::path& lockFile) {
  std::string who = readFile(lockFile.string());
  while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
  return who.empty() ? "holder unknown" : who;
}

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
    fail(key + " '" + dir + "' is in use by another sluice job (" + holderOf(path) + "); give this job another " +
         key + ", or wait for that one to end");
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
    if (entry.path().filename() != ".sluice.lock" && entry.path().filename() != ".sluice.ranks") return;
  }
  if (ec) return;
  fs::remove(fs::path(dir_) / ".sluice.ranks", ec);
  fs::remove(fs::path(dir_) / ".sluice.lock", ec);
  fs::remove(dir_, ec);
}

namespace {

bool within(const fs::path& inner, const fs::path& outer) {
  return std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end()).first == outer.end();
}

// Whether another process holds the lock file (a lock file nobody holds is a
// finished job's).
bool heldElsewhere(const fs::path& lockFile) {
  UniqueFd fd(::open(lockFile.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;  // released when fd closes
  return errno == EWOULDBLOCK;
}

// A directory of this job inside, or around, one another live job holds:
// the directories above it, and (up to 20,000 entries) the tree below it.
void refuseNestedInOthers(const fs::path& dir, const std::string& key, const std::vector<fs::path>& mine) {
  auto refuse = [&](const fs::path& lockFile, const char* relation) {
    throw ConfigError("config error: " + key + " '" + dir.string() + "' is " + relation + " '" +
                      lockFile.parent_path().string() + "', which another sluice job is using (" + holderOf(lockFile) +
                      "): jobs must not write into each other's directories; give this job a directory of its own");
  };
  auto ours = [&](const fs::path& lockFile) {
    return std::find(mine.begin(), mine.end(), lockFile.parent_path()) != mine.end();
  };
  for (fs::path up = dir.parent_path(); !up.empty(); up = up.parent_path()) {
    const fs::path lockFile = up / ".sluice.lock";
    if (!ours(lockFile) && heldElsewhere(lockFile)) refuse(lockFile, "inside");
    if (up == up.root_path()) break;
  }
  std::error_code ec;
  int seen = 0;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end && seen < 20000; it.increment(ec), ++seen) {
    const fs::path lockFile = it->path();
    if (lockFile.filename() != ".sluice.lock" || lockFile.parent_path() == dir || ours(lockFile)) continue;
    if (heldElsewhere(lockFile)) refuse(lockFile, "around");
  }
}

// An earlier run's outputs that starting afresh would overwrite: its metrics
// (truncated by a new run) and its checkpoints (step directories rewritten,
// `latest` moved back). "" when there are none or this job resumes.
std::string earlierRun(const Config& config) {
  std::string found;
  std::error_code ec;
  const fs::path metrics = fs::path(config.job.outputDir) / "metrics.jsonl";
  if (fs::exists(metrics, ec) && fs::file_size(metrics, ec) > 0) found = metrics.string();
  const fs::path ck(config.checkpointDir());
  for (fs::directory_iterator it(ck, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name == "latest" || name.rfind("step_", 0) == 0) {
      found += (found.empty() ? "" : " and ") + std::string("checkpoints in ") + ck.string();
      break;
    }
  }
  return found;
}

}  // namespace

std::vector<std::unique_ptr<OutputLock>> lockJobOutputs(const Config& config, bool resumes) {
  std::vector<std::unique_ptr<OutputLock>> locks;
  std::vector<fs::path> mine;  // the directories this job locks, canonical
  auto lock = [&](const std::string& dir, const std::string& key) {
    locks.push_back(std::make_unique<OutputLock>(dir, key));
    mine.push_back(fs::weakly_canonical(dir));
  };
  lock(config.job.outputDir, "job.output_dir");
  waitForEarlierRanks(config.job.outputDir, 10);  // Note [no orphans]: the last rank of an earlier job has exited
  // checkpoint.dir even with checkpoint.interval 0: a stop signal (SIGTERM,
  // preemption) writes a checkpoint there.
  const auto out = fs::weakly_canonical(config.job.outputDir);
  const auto ck = fs::weakly_canonical(config.checkpointDir());
  if (within(ck, out)) {
    requireDirectoryOrAbsent(config.checkpointDir(), "checkpoint.dir");  // covered by the output's lock
  } else {
    lock(config.checkpointDir(), "checkpoint.dir");
  }
  refuseNestedInOthers(out, "job.output_dir", mine);
  if (!within(ck, out)) refuseNestedInOthers(ck, "checkpoint.dir", mine);
  if (!config.job.overwrite && !resumes) {
    const std::string earlier = earlierRun(config);
    const std::string why = config.checkpoint.resume.mode == ResumeMode::Auto
                                ? "it has no checkpoint to resume (checkpoint.resume: auto found none in " +
                                      config.checkpointDir() + ")"
                                : "checkpoint.resume is " + resumeSettingName(config.checkpoint.resume);
    SLUICE_CHECK(earlier.empty(), ConfigError,
                 "config error: job.output_dir '" << config.job.outputDir << "' holds an earlier run (" << earlier
                     << ") and this job would start afresh over it, as " << why
                     << ": resume a checkpoint (checkpoint.resume), give this job another job.output_dir, or set "
                        "job.overwrite: true to replace the earlier run");
  }
  return locks;
}

}  // namespace sluice
