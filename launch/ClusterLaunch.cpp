#include "launch/ClusterLaunch.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/Error.h"

namespace sluice {
namespace {

std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

void addProgram(std::vector<std::string>& argv, const LaunchRequest& r) {
  argv.insert(argv.end(), {r.self, "worker", r.configPath});
  for (auto& o : r.overrides) argv.insert(argv.end(), {"--set", o});
}

}  // namespace

std::vector<RankHost> placeRanks(const std::vector<HostSlots>& hosts, int stages, int dataParallel) {
  const int world = stages * dataParallel;
  int64_t slots = 0;
  std::ostringstream sum;
  for (auto& h : hosts) {
    slots += h.slots;
    sum << (sum.tellp() > 0 ? " + " : "") << h.slots;
  }
  SLUICE_CHECK(world <= slots, ConfigError,
               "launch error: the job needs pipeline.stages (" << stages << ") x pipeline.data_parallel ("
                   << dataParallel << ") = " << world << " ranks, but the hostfile has " << sum.str() << " = "
                   << slots << " slots on " << hosts.size() << " host" << (hosts.size() > 1 ? "s" : "")
                   << ": add hosts or slots, or lower the stages or replicas");
  std::vector<RankHost> out;
  size_t h = 0;
  int used = 0;
  for (int rank = 0; rank < world; ++rank) {
    if (used == hosts[h].slots) {
      ++h;
      used = 0;
    }
    out.push_back({rank, rank % stages, rank / stages, hosts[h].host});
    ++used;
  }
  return out;
}

std::string placementTable(const std::vector<RankHost>& placement) {
  std::ostringstream os;
  std::vector<std::string> order;
  std::map<std::string, std::string> rows;
  for (auto& p : placement) {
    if (!rows.count(p.host)) order.push_back(p.host);
    rows[p.host] += " (stage " + std::to_string(p.stage) + ", replica " + std::to_string(p.replica) + ")";
  }
  for (auto& host : order) os << "  host " << host << ":" << rows[host] << "\n";
  return os.str();
}

bool inSlurmAllocation() { return std::getenv("SLURM_JOB_ID") != nullptr; }

LaunchEngine chooseEngine(const Config& c) {
  if (c.cluster.launcher == LauncherKind::Slurm) return LaunchEngine::Slurm;
  if (c.cluster.launcher == LauncherKind::Mpirun) return LaunchEngine::Mpirun;
  return inSlurmAllocation() ? LaunchEngine::Slurm : LaunchEngine::Mpirun;
}

LaunchPlan mpirunClusterPlan(const Config& c, const std::vector<HostSlots>& hosts, const LaunchRequest& r) {
  placeRanks(hosts, c.pipeline.stages, c.pipeline.dataParallel);  // checks that the world fits
  LaunchPlan plan;
  auto& a = plan.argv;
  a = {"mpirun", "-np", std::to_string(c.worldSize()), "--hostfile", std::filesystem::absolute(c.cluster.hostfile).string(),
       "--map-by", "slot", "--bind-to", "none"};
  if (r.asRoot) a.push_back("--allow-run-as-root");
  a.insert(a.end(), {"--mca", "plm_rsh_agent", c.cluster.rshAgent});
  if (!c.cluster.interface.empty()) {
    a.insert(a.end(), {"--mca", "btl_tcp_if_include", c.cluster.interface, "--mca", "oob_tcp_if_include",
                       c.cluster.interface});
  }
  a.insert(a.end(), {"-x", "MASTER_ADDR=" + hosts.front().host, "-x", "MASTER_PORT=" + std::to_string(c.cluster.masterPort)});
  for (auto& [k, v] : c.cluster.env) a.insert(a.end(), {"-x", k + "=" + v});
  a.insert(a.end(), c.cluster.extraMpirunArgs.begin(), c.cluster.extraMpirunArgs.end());
  addProgram(a, r);
  return plan;
}

int slurmNodes(const Config& c) {
  if (c.cluster.nodes > 0) return c.cluster.nodes;
  if (!c.cluster.hostfile.empty()) {
    auto placement = placeRanks(readHostfile(c.cluster.hostfile), c.pipeline.stages, c.pipeline.dataParallel);
    int nodes = 0;
    std::string last;
    for (auto& p : placement) {
      if (p.host != last) ++nodes;
      last = p.host;
    }
    return nodes;
  }
  if (const char* n = std::getenv("SLURM_JOB_NUM_NODES")) return std::max(1, std::atoi(n));
  throw ConfigError(
      "launch error: Slurm needs a node count: set cluster.nodes, or cluster.hostfile (its hosts that the world "
      "uses), or run inside an allocation (salloc/sbatch)");
}

LaunchPlan srunPlan(const Config& c, int nodes, const LaunchRequest& r) {
  SLUICE_CHECK(nodes <= c.worldSize(), ConfigError,
               "launch error: " << nodes << " Slurm nodes for " << c.worldSize()
                                << " ranks (pipeline.stages x pipeline.data_parallel): lower cluster.nodes");
  LaunchPlan plan;
  auto& a = plan.argv;
  a = {"srun", "--mpi=pmix", "-N", std::to_string(nodes), "-n", std::to_string(c.worldSize()), "--kill-on-bad-exit=1"};
  std::string exports = "--export=ALL,MASTER_PORT=" + std::to_string(c.cluster.masterPort);
  if (!c.cluster.interface.empty()) exports += ",OMPI_MCA_btl_tcp_if_include=" + c.cluster.interface;
  for (auto& [k, v] : c.cluster.env) {
    SLUICE_CHECK(v.find(',') == std::string::npos, ConfigError,
                 "launch error: cluster.env." << k << " contains a comma, which srun --export cannot pass");
    exports += "," + k + "=" + v;
  }
  a.push_back(exports);
  addProgram(a, r);
  return plan;
}

// Slurm reads an #SBATCH line itself (not the shell): it honours double
// quotes, reads % as a file-name pattern, and ends the directive at a newline.
std::string sbatchOutput(const std::string& dir) {
  std::string shown;
  for (char ch : dir) shown += ch == '\n' ? std::string("\\n") : ch == '\r' ? std::string("\\r") : std::string(1, ch);
  SLUICE_CHECK(dir.find_first_of("\n\r\"%") == std::string::npos, ConfigError,
               "launch error: job.output_dir '" << shown << "' holds a newline, a double quote or a %, which an "
                                                  "#SBATCH --output line cannot carry (Slurm reads % as a file-name "
                                                  "pattern): choose a directory without them");
  const std::string file = dir + "/slurm-%j.out";
  return file.find_first_of(" \t") == std::string::npos ? file : "\"" + file + "\"";
}

std::string sbatchScript(const Config& c, int nodes, const LaunchRequest& r) {
  std::ostringstream os;
  os << "#!/bin/bash\n"
     << "# Written by `sluice launch --sbatch`; submit with: sbatch THIS_FILE\n"
     << "#SBATCH --job-name=sluice\n"
     << "#SBATCH --nodes=" << nodes << "\n"
     << "#SBATCH --ntasks=" << c.worldSize() << "\n"
     << "#SBATCH --signal=B:USR1@120\n"
     << "#SBATCH --output=" << sbatchOutput(std::filesystem::absolute(c.job.outputDir).string()) << "\n"
     << "# SIGUSR1 two minutes before the time limit: the ranks finish their step, write a\n"
     << "# checkpoint and exit 0; submitting the script again resumes (checkpoint.resume: auto).\n"
     << "set -euo pipefail\n"
     << "mkdir -p " << quoted(std::filesystem::absolute(c.job.outputDir).string()) << "\n"
     << "cd " << quoted(std::filesystem::current_path().string()) << "\n"
     << "exec " << quoted(r.self) << " launch " << quoted(r.configPath) << " --set cluster.launcher=slurm --set cluster.nodes="
     << nodes;
  for (auto& o : r.overrides) os << " --set " << quoted(o);
  os << "\n";
  return os.str();
}

std::string commandLine(const LaunchPlan& plan) {
  std::string line;
  for (auto& [k, v] : plan.env) line += k + "=" + quoted(v) + " ";
  for (size_t i = 0; i < plan.argv.size(); ++i) line += (i ? " " : "") + quoted(plan.argv[i]);
  return line;
}

}  // namespace sluice
