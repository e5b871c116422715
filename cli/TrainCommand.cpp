// `sluice train CONFIG` (the launcher: mpirun as a supervised child for more than one
// rank) and `sluice worker CONFIG` (one rank, what train starts).
#include "cli/Commands.h"

#include <csignal>
#include <cstdio>
#include <unistd.h>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/Checkpoint.h"
#include "config/Config.h"
#include "core/Communicator.h"
#include "core/Device.h"
#include "core/Error.h"
#include "core/Files.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "launch/Launch.h"
#include "launch/LauncherWatch.h"
#include "launch/OutputLock.h"
#include "launch/Supervisor.h"
#include "train/ModelFromConfig.h"
#include "train/Trainer.h"

namespace sluice::cli {

int trainCommand(const CommandLine& a, int argc, char** argv) {
  auto config = sluice::Config::load(a.config, a.overrides);  // validates before anything is written
  if (!sluice::Communicator::launchedByMpi()) {
    sluice::checkModelFitsMemory(config, config.worldSize());
    // A GPU job on a machine without one stops here, before any rank starts.
    if (a.command == "train" && config.job.device == sluice::DeviceKind::Cuda) {
      sluice::rankDevice(config.job.device, 0);
    }
  }
  // The job's launcher (or a single-process run) owns its outputs until it
  // exits: checked writable now, one job per directory (launch/OutputLock.h).
  std::vector<std::unique_ptr<sluice::OutputLock>> locks;
  if (!sluice::Communicator::launchedByMpi()) {
    locks = sluice::lockJobOutputs(config, !sluice::resumeDirectory(config).empty());
  } else {
    sluice::holdRanksLock(config.job.outputDir);  // until this rank exits: no next job starts here before
  }
  const bool supervise = config.worldSize() > 1 || config.cluster.maxRestarts > 0;
  if (a.command == "train" && supervise && !sluice::Communicator::launchedByMpi()) {
    // mpirun as a child: its output filtered, the root cause named, restarts and preemption handled.
    sluice::SupervisedJob job;
    job.plan = sluice::localMpirunPlan(config.worldSize(), sluice::selfExecutable(), a.config, a.overrides,
                                       sluice::hardwareCores(), geteuid() == 0);
    job.maxRestarts = config.cluster.maxRestarts;
    job.ranks = config.worldSize();
    job.resumeHint = "sluice train " + a.config + " (checkpoint.resume: auto resumes from " + config.checkpointDir() +
                     ")";
    std::string line;
    for (auto& s : job.plan.argv) line += (line.empty() ? "" : " ") + s;
    std::cerr << "sluice: starting " << config.worldSize() << " ranks: " << line << std::endl;
    return sluice::superviseJob(job);
  }
  sluice::installStopHandlers();
  if (sluice::stopCaught()) std::raise(SIGUSR1);  // a stop during start-up: the run stops at its first step
  if (sluice::Communicator::launchedByMpi()) {
    // To the supervisor: a stop (SIGUSR1) can be taken from now on (Supervisor.h).
    std::fprintf(stderr, "%s\n", sluice::kRankReadyLine);
    std::fflush(stderr);
  }
  sluice::Communicator::initialize(&argc, &argv);
  const int world = sluice::Communicator::world().size();
  try {
    sluice::runWorker(config);
  } catch (const std::exception& e) {
    // One rank failing stops them all, with this rank's reason on record.
    sluice::log::error("this rank failed: " + messageOf(e));
    if (world > 1) sluice::Communicator::abortAll(dynamic_cast<const sluice::ConfigError*>(&e) ? 2 : 1);
    sluice::Communicator::finalize();
    return dynamic_cast<const sluice::ConfigError*>(&e) ? 2 : 1;
  }
  sluice::Communicator::finalize();
  return 0;
}

}  // namespace sluice::cli
