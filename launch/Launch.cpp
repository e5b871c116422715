#include "launch/Launch.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace sluice {

LaunchPlan localMpirunPlan(int worldSize, const std::string& self, const std::string& configPath,
                           const std::vector<std::string>& overrides, int cores, bool asRoot,
                           const std::string& command, const std::vector<std::string>& extraArgs) {
  LaunchPlan plan;
  plan.argv = {"mpirun", "-np", std::to_string(worldSize), "--bind-to", "none"};
  if (asRoot) plan.argv.push_back("--allow-run-as-root");
  if (worldSize > cores) {
    plan.argv.push_back("--oversubscribe");
    plan.env.push_back({"OMPI_MCA_mpi_yield_when_idle", "1"});
  }
  plan.argv.insert(plan.argv.end(), {self, command, configPath});
  plan.argv.insert(plan.argv.end(), extraArgs.begin(), extraArgs.end());
  for (auto& o : overrides) plan.argv.insert(plan.argv.end(), {"--set", o});
  return plan;
}

std::string selfExecutable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "sluice";
  buf[n] = '\0';
  return buf;
}

}  // namespace sluice
