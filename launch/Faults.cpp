#include "launch/Faults.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "core/Error.h"
#include "core/Log.h"

namespace sluice::faults {
namespace {

struct Fault {
  std::string kind;
  int rank = -1, microBatch = -1;
  int64_t step = -1;
};

const Fault& fault() {
  static const Fault f = [] {
    Fault out;
    const char* spec = std::getenv("SLUICE_FAULT");
    const char* restart = std::getenv("RESTART_COUNT");
    if (!spec || (restart && std::atoi(restart) > 0)) return out;
    std::stringstream ss(spec);
    std::string part;
    std::getline(ss, out.kind, ':');
    while (std::getline(ss, part, ':')) {
      auto eq = part.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
      if (key == "rank") out.rank = std::atoi(value.c_str());
      if (key == "step") out.step = std::atoll(value.c_str());
      if (key == "mb") out.microBatch = std::atoi(value.c_str());
    }
    return out;
  }();
  return f;
}

bool matches(const char* kind, int rank, int64_t step) {
  const auto& f = fault();
  return f.kind == kind && f.rank == rank && f.step == step;
}

}  // namespace

void atStepStart(int rank, int64_t step) {
  if (matches("hang", rank, step)) {
    log::warn("SLUICE_FAULT: this rank stops answering at step " + std::to_string(step));
    ::raise(SIGSTOP);
  }
  if (matches("kill", rank, step)) {
    log::warn("SLUICE_FAULT: this rank dies at step " + std::to_string(step));
    ::raise(SIGKILL);
  }
}

void atForward(int rank, int64_t step, int microBatch) {
  const auto& f = fault();
  if (matches("throw", rank, step) && (f.microBatch < 0 || f.microBatch == microBatch)) {
    throw Error("SLUICE_FAULT: injected failure in micro-batch " + std::to_string(microBatch) + " of step " +
                std::to_string(step) + " on rank " + std::to_string(rank));
  }
}

void atCheckpointWrite(int rank, int64_t step) {
  if (matches("kill_in_checkpoint", rank, step)) {
    log::warn("SLUICE_FAULT: this rank dies while writing the checkpoint of step " + std::to_string(step));
    ::raise(SIGKILL);
  }
}

bool nanAt(int rank, int64_t step) { return matches("nan", rank, step); }

void inProfile(int rank) {
  // The profile kinds take no step: unset, it is -1.
  if (matches("hang_in_profile", rank, -1)) {
    log::warn("SLUICE_FAULT: this rank stops answering in the profile");
    ::raise(SIGSTOP);
  }
  if (matches("throw_in_profile", rank, -1)) {
    throw Error("SLUICE_FAULT: injected failure in the profile on rank " + std::to_string(rank));
  }
}

}  // namespace sluice::faults
