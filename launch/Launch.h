// Starting the ranks of a job on this machine.
//
// `sluice train` with more than one rank and not already under MPI re-runs
// itself as `mpirun -np WORLD ... sluice worker CONFIG --set ...`, so the user
// never types mpirun for a local run. Oversubscription (more ranks than cores)
// turns on Open MPI's yield-when-idle: its receive loops otherwise spin and
// starve the ranks that do the work.
#pragma once

#include <string>
#include <vector>

namespace sluice {

struct LaunchPlan {
  std::vector<std::string> argv;            // mpirun command line
  std::vector<std::pair<std::string, std::string>> env;  // set before exec
};

// `command` is the sluice subcommand each rank runs ("worker", "profile", ...);
// extraArgs follow the config path.
LaunchPlan localMpirunPlan(int worldSize, const std::string& self, const std::string& configPath,
                           const std::vector<std::string>& overrides, int cores, bool asRoot,
                           const std::string& command = "worker", const std::vector<std::string>& extraArgs = {});

// Path of the running executable.
std::string selfExecutable();

}  // namespace sluice
