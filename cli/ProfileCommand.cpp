// `sluice profile CONFIG -o FILE`: every node's time and saved bytes, p2p and swap bandwidth.
#include "cli/Commands.h"

#include <ATen/Parallel.h>
#include <unistd.h>
#include <iostream>

#include "config/Config.h"
#include "core/Communicator.h"
#include "core/Error.h"
#include "core/Files.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "launch/Launch.h"
#include "launch/RankEnv.h"
#include "launch/Supervisor.h"
#include "partition/Profile.h"
#include "partition/Profiler.h"
#include "train/ModelFromConfig.h"
#include "train/Planning.h"

namespace sluice::cli {

// Runs on 2 ranks: both profile at once (node times averaged), ranks 0 and 1
// time p2p, rank 0 writes the file.
int profileCommand(const CommandLine& a, int argc, char** argv) {
  if (a.output.empty()) throw sluice::ConfigError("sluice: profile needs -o FILE\n\n" + sluice::commandLineUsage());
  auto config = sluice::Config::load(a.config, a.overrides);
  if (!sluice::Communicator::launchedByMpi()) {
    // mpirun as a child, as for `train`: a failing rank is named once, without Open MPI's chatter.
    sluice::SupervisedJob job;
    job.plan = sluice::localMpirunPlan(2, sluice::selfExecutable(), a.config, a.overrides, sluice::hardwareCores(),
                                       geteuid() == 0, "profile", {"-o", a.output});
    return sluice::superviseJob(job);
  }
  sluice::Communicator::initialize(&argc, &argv);
  auto world = sluice::Communicator::world();
  sluice::log::setRank(world.rank());
  // A wait on a peer gives up as training's start-up does (the profile is part of it there).
  sluice::Communicator::setWaitTimeout(config.cluster.initTimeoutS, "cluster.init_timeout_s");
  try {
    at::set_num_threads(sluice::threadsForRank(config, sluice::hardwareCores(), world.size()));
    // The swap tier is timed where training would swap (memory.swap_dir).
    auto machine = sluice::partition::measureMachine(world, config.memory.swap ? sluice::swapDir(config) : "");
    // Both ranks profile at once, loading the machine as 2-rank training does.
    auto setup = sluice::makeModelSetup(config);
    auto graph = setup.capture(config.training.microBatchSize);
    auto profile = sluice::profileModel(config, setup, graph, world);
    if (world.rank() == 0) {
      profile.machine = machine;
      profile.save(a.output);
      std::cout << profile.summary() << "wrote " << a.output << std::endl;
    }
    world.barrier();
  } catch (const std::exception& e) {
    sluice::log::error("this rank failed: profile: " + messageOf(e));  // the supervisor's root cause
    sluice::Communicator::abortAll(1);
  }
  sluice::Communicator::finalize();
  return 0;
}

}  // namespace sluice::cli
