// `sluice launch CONFIG`: the job's ranks on several machines, by mpirun or Slurm.
#include "cli/Commands.h"

#include <unistd.h>
#include <filesystem>
#include <iostream>

#include "checkpoint/Checkpoint.h"
#include "config/Config.h"
#include "core/Error.h"
#include "core/Files.h"
#include "launch/ClusterLaunch.h"
#include "launch/Hostfile.h"
#include "launch/Launch.h"
#include "launch/OutputLock.h"
#include "launch/Supervisor.h"

namespace sluice::cli {

// `sluice launch`: the job's ranks on several machines (launch/ClusterLaunch.h).
int launchCommand(const CommandLine& given, int, char**) {
  CommandLine a = given;
  if (!a.hostfile.empty()) a.overrides.push_back("cluster.hostfile=" + a.hostfile);
  auto config = sluice::Config::load(a.config, a.overrides);  // validates before anything is written
  sluice::LaunchRequest request;
  request.self = sluice::selfExecutable();
  request.configPath = std::filesystem::absolute(a.config).lexically_normal().string();
  request.overrides = a.overrides;
  request.asRoot = geteuid() == 0;
  const auto engine = sluice::chooseEngine(config);
  sluice::LaunchPlan plan;
  std::string where;
  if (!a.sbatch.empty() || engine == sluice::LaunchEngine::Slurm) {
    const int nodes = sluice::slurmNodes(config);
    if (!a.sbatch.empty()) {
      const std::string script = sluice::sbatchScript(config, nodes, request);
      // Slurm opens the job's output file (under job.output_dir) before the script runs.
      std::filesystem::create_directories(config.job.outputDir);
      sluice::writeFileAtomically(a.sbatch, script);
      std::filesystem::permissions(a.sbatch, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
      std::cout << script << "wrote " << a.sbatch << "; submit it with: sbatch " << a.sbatch << std::endl;
      return 0;
    }
    plan = sluice::srunPlan(config, nodes, request);
    where = std::to_string(nodes) + " Slurm node" + (nodes > 1 ? "s" : "") + " with srun";
  } else {
    SLUICE_CHECK(!config.cluster.hostfile.empty(), sluice::ConfigError,
                 "launch error: mpirun needs the hosts: set cluster.hostfile or pass --hostfile FILE (one machine: "
                 "use sluice train)");
    auto hosts = sluice::readHostfile(config.cluster.hostfile);
    auto placement = sluice::placeRanks(hosts, config.pipeline.stages, config.pipeline.dataParallel);
    plan = sluice::mpirunClusterPlan(config, hosts, request);
    std::cerr << "sluice: " << config.worldSize() << " ranks on " << hosts.size() << " host"
              << (hosts.size() > 1 ? "s" : "") << " (" << config.cluster.hostfile << "):\n"
              << sluice::placementTable(placement);
    where = "mpirun";
  }
  const std::string line = sluice::commandLine(plan);
  if (a.dryRun) {
    std::cout << line << std::endl;
    return 0;
  }
  auto locks = sluice::lockJobOutputs(config, !sluice::resumeDirectory(config).empty());  // launch/OutputLock.h
  std::cerr << "sluice: launching " << config.worldSize() << " ranks (" << where << "): " << line << std::endl;
  sluice::SupervisedJob job;
  job.plan = plan;
  job.maxRestarts = config.cluster.maxRestarts;
  job.ranks = config.worldSize();
  job.resumeHint = "sluice launch " + a.config + " (checkpoint.resume: auto resumes from " + config.checkpointDir() + ")";
  return sluice::superviseJob(job);
}

}  // namespace sluice::cli
