// launch::superviseJob: runs a job's launch command (mpirun or srun) as a
// child process and watches it; what `sluice train` and `sluice launch` do.
//
// - The ranks' output passes through, less the launcher's own chatter on a
//   failure (Open MPI's help blocks, ORTE_ERROR_LOG lines), which would bury
//   the real message. The first rank that reports a failure ("... error: this
//   rank failed: ...") or that dies on a signal is the root cause: printed once
//   at the end (its own line is held back, and other ranks' lines with the
//   same message are dropped), with a non-zero exit.
// - Restarts: after a failure that is not a bad config (exit code 2), the
//   whole job runs again, up to maxRestarts times, each logged with its cause,
//   with RESTART_COUNT=k in the ranks' environment; ranks resume from the
//   latest checkpoint (checkpoint.resume: auto).
// - Preemption: SIGTERM or SIGUSR1 to this process becomes SIGUSR1 to the
//   launch command, which forwards it to every rank (Open MPI does): they
//   finish their step, write a checkpoint and exit 0; this process then says
//   that the job can be resumed.
// Returns the exit code for the CLI. Blocks until the job ends.
#pragma once

#include <string>

#include "launch/Launch.h"

namespace sluice {

// What each rank prints on stderr once its stop handlers are installed
// (installStopHandlers); the supervisor counts and swallows these lines.
inline constexpr const char* kRankReadyLine = "sluice: rank ready";

struct SupervisedJob {
  LaunchPlan plan;
  int maxRestarts = 0;
  // The job's ranks, each saying kRankReadyLine when it can take a stop: a
  // stop asked for before all have (a SIGTERM right after the start) is held
  // until then, instead of killing a rank that has no handler yet on
  // SIGUSR1. 0: forward at once (a command whose ranks say nothing).
  int ranks = 0;
  std::string resumeHint;  // printed after a preemption: how to resume
};

int superviseJob(const SupervisedJob& job);

// Installs the supervisor's handlers (SIGTERM, SIGINT, SIGUSR1: stop;
// SIGUSR2: report) now, so a stop during start-up (config, locks) is kept:
// superviseJob then starts nothing. stopCaught(): whether one came.
void catchStopSignals();
bool stopCaught();

// Exported for tests: whether a line of the launcher's stderr is its own
// failure chatter, and the root cause a line names ("" when none).
bool isLauncherNoise(const std::string& line, bool inHelpBlock);
std::string rootCauseOf(const std::string& line);

}  // namespace sluice
