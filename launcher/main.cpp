// The `sluice` command line. Library code throws; this file turns errors into
// a message and an exit code (2: bad config or usage, 1: failure at run time).
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/Communicator.h"
#include "core/Error.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "launcher/Config.h"
#include "launcher/Job.h"
#include "launcher/Launch.h"
#include "launcher/ModelSetup.h"
#include "partition/Profile.h"

namespace {

constexpr const char* kUsage =
    "usage: sluice <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set key=value]...   train from a YAML config; starts mpirun itself when the\n"
    "                                      config needs more than one rank\n"
    "  worker CONFIG [--set key=value]...  one rank of a job (what mpirun/srun start)\n"
    "  graph CONFIG [--set key=value]... [-o FILE]\n"
    "                                      capture the model, print one line per node (the indices\n"
    "                                      pipeline.cuts refers to) and optionally save it as protobuf\n"
    "  profile CONFIG -o FILE [--set key=value]...\n"
    "                                      time every node (forward, backward), measure saved-tensor\n"
    "                                      bytes, p2p and swap bandwidth; write a Profile (protobuf)\n"
    "  --version                           versions of Sluice, LibTorch, Open MPI and the BLAS in use\n";

struct Args {
  std::string command, config, output;
  std::vector<std::string> overrides;
};

Args parseArgs(int argc, char** argv) {
  Args a;
  if (argc < 2) throw sluice::ConfigError(kUsage);
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--set" || s == "-o") {
      if (i + 1 >= argc) throw sluice::ConfigError("sluice: " + s + " needs a value\n\n" + kUsage);
      (s == "--set" ? a.overrides.emplace_back(argv[++i]) : a.output = argv[++i]);
    } else if (s.rfind("--set=", 0) == 0) {
      a.overrides.push_back(s.substr(6));
    } else if (!s.empty() && s[0] == '-') {
      throw sluice::ConfigError("sluice: unknown option '" + s + "'\n\n" + kUsage);
    } else if (a.config.empty()) {
      a.config = s;
    } else {
      throw sluice::ConfigError("sluice: unexpected argument '" + s + "'\n\n" + kUsage);
    }
  }
  return a;
}

int printVersion() {
  std::cout << "sluice " << SLUICE_VERSION << "\n"
            << "LibTorch " << sluice::torchVersion() << "\n"
            << sluice::mpiLibraryVersion() << "\n"
            << "BLAS: " << sluice::blasKind() << " (" << sluice::loadedBlas() << ")\n"
            << "cores: " << sluice::hardwareCores() << "\n";
  return 0;
}

int runGraph(const Args& a) {
  auto config = sluice::Config::load(a.config, a.overrides);
  auto setup = sluice::makeModelSetup(config);
  auto graph = setup.capture(config.training.microBatchSize);
  std::cout << graph.toString();
  std::cout << graph.numNodes() << " nodes, hash " << graph.hash() << ", " << graph.validCuts().size()
            << " valid cut points\n";
  if (!a.output.empty()) {
    graph.save(a.output);
    std::cout << "saved " << a.output << "\n";
  }
  return 0;
}

// Profiles on rank 0; ranks 0 and 1 also time p2p, so the command runs on 2 ranks.
int runProfile(const Args& a, int argc, char** argv) {
  if (a.output.empty()) throw sluice::ConfigError("sluice: profile needs -o FILE\n\n" + std::string(kUsage));
  auto config = sluice::Config::load(a.config, a.overrides);
  if (!sluice::Communicator::launchedByMpi()) {
    auto plan = sluice::localMpirunPlan(2, sluice::selfExecutable(), a.config, a.overrides, sluice::hardwareCores(),
                                        geteuid() == 0, "profile", {"-o", a.output});
    plan.env.push_back({"OMPI_MCA_mpi_yield_when_idle", "1"});  // rank 1 mostly waits
    sluice::execPlan(plan);
  }
  sluice::Communicator::initialize(&argc, &argv);
  auto world = sluice::Communicator::world();
  sluice::log::setRank(world.rank());
  try {
    at::set_num_threads(sluice::threadsForRank(config, sluice::hardwareCores(), world.size()));
    std::string dir = std::filesystem::path(a.output).parent_path().string();
    auto machine = sluice::partition::measureMachine(world, dir.empty() ? "." : dir);
    if (world.rank() == 0) {
      auto setup = sluice::makeModelSetup(config);
      auto graph = setup.capture(config.training.microBatchSize);
      std::vector<std::string> names;
      for (auto& in : graph.inputs()) {
        if (in.kind != sluice::InputKind::Data) names.push_back(in.name);
      }
      std::vector<torch::Tensor> inputs{setup.dataset->batch(0, config.training.microBatchSize).input};
      for (auto& t : setup.tensorsByName(names)) inputs.push_back(t);
      sluice::log::info("profiling " + std::to_string(graph.numNodes()) + " nodes at micro-batch size " +
                        std::to_string(config.training.microBatchSize) + " ...");
      auto profile = sluice::partition::profileGraph(graph, inputs);
      profile.machine = machine;
      profile.save(a.output);
      std::cout << profile.summary() << "wrote " << a.output << std::endl;
    }
    world.barrier();
  } catch (const std::exception& e) {
    sluice::log::error(std::string("profile failed: ") + e.what());
    sluice::Communicator::abortAll(1);
  }
  sluice::Communicator::finalize();
  return 0;
}

int runTrainOrWorker(const Args& a, int argc, char** argv) {
  auto config = sluice::Config::load(a.config, a.overrides);  // validates before anything is written
  if (a.command == "train" && config.worldSize() > 1 && !sluice::Communicator::launchedByMpi()) {
    auto plan = sluice::localMpirunPlan(config.worldSize(), sluice::selfExecutable(), a.config, a.overrides,
                                        sluice::hardwareCores(), geteuid() == 0);
    std::string line;
    for (auto& s : plan.argv) line += (line.empty() ? "" : " ") + s;
    std::cerr << "sluice: starting " << config.worldSize() << " ranks: " << line << std::endl;
    sluice::execPlan(plan);
  }
  sluice::Communicator::initialize(&argc, &argv);
  const int world = sluice::Communicator::world().size();
  try {
    sluice::runWorker(config);
  } catch (const std::exception& e) {
    // One rank failing stops them all, with this rank's reason on record.
    sluice::log::error(std::string("this rank failed: ") + e.what());
    if (world > 1) sluice::Communicator::abortAll(dynamic_cast<const sluice::ConfigError*>(&e) ? 2 : 1);
    sluice::Communicator::finalize();
    return dynamic_cast<const sluice::ConfigError*>(&e) ? 2 : 1;
  }
  sluice::Communicator::finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0)) {
      return printVersion();
    }
    if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0)) {
      std::cout << kUsage;
      return 0;
    }
    Args a = parseArgs(argc, argv);
    if (a.config.empty()) throw sluice::ConfigError("sluice: " + a.command + " needs a CONFIG file\n\n" + kUsage);
    if (a.command == "train" || a.command == "worker") return runTrainOrWorker(a, argc, argv);
    if (a.command == "graph") return runGraph(a);
    if (a.command == "profile") return runProfile(a, argc, argv);
    throw sluice::ConfigError("sluice: unknown command '" + a.command + "'\n\n" + kUsage);
  } catch (const sluice::ConfigError& e) {
    std::cerr << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "sluice: error: " << e.what() << std::endl;
    return 1;
  }
}
