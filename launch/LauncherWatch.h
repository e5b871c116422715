// launch::LauncherWatch: Note [no orphans], the ranks' side. No rank
// outlives the `sluice train` / `sluice launch` process that started it,
// not even by a second, and no rank of a job lives on while the next job in
// its directory starts.
//
//   - The supervisor's child (mpirun, srun) gets SLUICE_LAUNCHER_PID and
//     SLUICE_LAUNCHER_HOST, which ranks inherit. watchLauncher(), called by
//     each rank at start on the launcher's machine, opens a pidfd for that
//     pid and checks that it is one of the rank's ancestors; a thread then
//     waits on the pidfd: the moment the launcher dies (SIGKILL included)
//     the rank ends with _exit(kLauncherDiedExit), writing nothing more (no
//     metrics line, no checkpoint). A launcher already gone ends the rank at
//     once. Ranks that are not its descendants (on other machines, or
//     started by srun's slurmstepd) end when mpirun's daemon or srun's step
//     goes (their launcher's own teardown).
//   - holdRanksLock(): each rank holds a shared flock on
//     job.output_dir/.sluice.ranks for its whole life (where it can open
//     it: the same machine or a shared file system). waitForEarlierRanks(),
//     called by a launcher once it holds the directory's lock, waits until
//     no process holds it (the last rank of an earlier job has exited), for
//     at most `seconds`, and refuses the job (ConfigError) if one still does.
// Torch-free.
#pragma once

#include <string>

namespace sluice {

inline constexpr const char* kLauncherPidEnv = "SLUICE_LAUNCHER_PID";
inline constexpr const char* kLauncherHostEnv = "SLUICE_LAUNCHER_HOST";
inline constexpr int kLauncherDiedExit = 137;

// A rank: watch the launcher named by SLUICE_LAUNCHER_PID (nothing when it is
// unset or not an ancestor). Returns whether a watch was started.
bool watchLauncher();

// Ends the process at once when the watched launcher has died: called right
// before a metrics line or a checkpoint file is written, so a rank that was
// stopped when its launcher died and runs again writes nothing (its watch
// thread may not have run yet). Nothing without a watch.
void exitIfLauncherGone();

// A rank: hold dir/.sluice.ranks shared until the process ends (nothing when it cannot be opened).
void holdRanksLock(const std::string& dir);

// A launcher holding dir's lock: wait for earlier ranks to let go of dir/.sluice.ranks.
void waitForEarlierRanks(const std::string& dir, double seconds);

// Whether `pid` is an ancestor of this process (by /proc's parent links).
bool isAncestor(int pid);

}  // namespace sluice
