// launch::OutputLock: one job at a time per output directory, and outputs
// checked before any work they should protect.
//
// A job's launcher (the `sluice train` or `sluice launch` process; a
// single-process run itself) takes an exclusive lock (flock) on
// DIR/.sluice.lock for job.output_dir and, when it lies elsewhere,
// checkpoint.dir (also with checkpoint.interval 0: a stop signal writes a
// checkpoint there), and holds it until it exits: a second job given the
// same directory is refused with the holder's pid and host instead of
// overwriting its metrics, logs and checkpoints. So is a job whose
// directory lies inside, or around, a directory another live job holds
// (its lock file is found above it, or in the tree below it). A job that
// would start afresh (no checkpoint to resume) in a directory holding an
// earlier run's metrics.jsonl or checkpoints is refused unless
// job.overwrite: true. Swap files need no lock: each rank's is its own
// (mkstemp, removed when the rank ends), so jobs may share memory.swap_dir. Taking the lock also
// checks, at start-up, that each directory exists or can be made and is
// writable (a checkpoint.dir that is a file is found here, not at the first
// save). The lock goes when the process ends, however it ends; a directory
// the lock created and nothing wrote to is removed again (a job that fails
// at start-up leaves no output behind).
//
//   auto locks = lockJobOutputs(config, resumes);  // ConfigError naming the directory and the fix
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/Files.h"
#include "config/Config.h"

namespace sluice {

class OutputLock {
 public:
  // `key` names the setting in messages (e.g. "job.output_dir").
  OutputLock(const std::string& dir, const std::string& key);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  void removeIfUnused() noexcept;
  UniqueFd fd_;
  bool created_ = false;  // this lock made the directory
  std::string dir_;
};

// resumes: the job continues from a checkpoint (resumeDirectory, checkpoint/Checkpoint.h).
std::vector<std::unique_ptr<OutputLock>> lockJobOutputs(const Config& config, bool resumes);

}  // namespace sluice
