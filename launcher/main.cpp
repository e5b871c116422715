// The `sluice` command line. Library code throws; this file turns errors into
// a message and an exit code (2: bad config or usage, 1: failure at run time).
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/Capture.h"
#include "core/Communicator.h"
#include "core/Device.h"
#include "core/Error.h"
#include "core/Files.h"
#include "core/HeapPolicy.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "launcher/Checkpoint.h"
#include "launcher/LauncherWatch.h"
#include "launcher/ClusterLaunch.h"
#include "launcher/CommandLine.h"
#include "launcher/Config.h"
#include "launcher/Job.h"
#include "launcher/Launch.h"
#include "launcher/ModelSetup.h"
#include "launcher/OutputLock.h"
#include "launcher/Planning.h"
#include "launcher/SafeTensors.h"
#include "launcher/Simulate.h"
#include "launcher/Supervisor.h"
#include "launcher/TimelineSvg.h"
#include "launcher/Trainer.h"
#include "models/TorchScript.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
#include "partition/Profiler.h"

namespace fs = std::filesystem;

namespace {

// LibTorch's errors carry a C++ backtrace in what(); users get the message.
std::string messageOf(const std::exception& e) {
  if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

int printVersion() {
  std::cout << "sluice " << SLUICE_VERSION << "\n"
            << "LibTorch " << sluice::torchVersion() << "\n"
            << sluice::mpiLibraryVersion() << "\n"
            << "BLAS: " << sluice::blasKind() << " (" << sluice::loadedBlas() << ")\n"
            << "CUDA: " << sluice::cudaBuildText() << "; "
            << (sluice::cudaDevices() > 0 ? std::to_string(sluice::cudaDevices()) + " device(s)"
                                           : "no device (" + sluice::cudaAbsentReason() + ")")
            << "\n"
            << "cores: " << sluice::hardwareCores() << "\n";
  return 0;
}

int runGraph(const sluice::CommandLine& a) {
  auto config = sluice::Config::load(a.config, a.overrides);
  auto setup = sluice::makeModelSetup(config);
  auto graph = setup.capture(config.training.microBatchSize);
  std::cout << graph.toString();
  if (graph.fusedAttentions() > 0)
    std::cout << graph.fusedAttentions() << " causal attentions fused into scaled_dot_product_attention "
              << "(model.fuse_attention: false keeps them as written)\n";
  std::cout << graph.numNodes() << " nodes, hash " << graph.hash() << ", " << graph.validCuts().size()
            << " valid cut points\n";
  if (!a.output.empty()) {
    graph.save(a.output);
    std::cout << "saved " << a.output << "\n";
  }
  return 0;
}

// Runs on 2 ranks: both profile at once (node times averaged), ranks 0 and 1
// time p2p, rank 0 writes the file.
int runProfile(const sluice::CommandLine& a, int argc, char** argv) {
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

// The flags win over the config: --method over pipeline.partition.method,
// --budget-mb over memory.budget_mb (both checked like config values).
int runPartition(sluice::CommandLine a) {
  if (a.output.empty() || a.profile.empty()) {
    throw sluice::ConfigError("sluice: partition needs --profile FILE and -o FILE\n\n" + sluice::commandLineUsage());
  }
  if (!a.method.empty()) a.overrides.push_back("pipeline.partition.method=" + a.method);
  if (!a.budgetMb.empty()) a.overrides.push_back("memory.budget_mb=" + a.budgetMb);
  auto config = sluice::Config::load(a.config, a.overrides);
  auto setup = sluice::makeModelSetup(config);
  auto graph = setup.capture(config.training.microBatchSize);
  auto profile = sluice::partition::Profile::load(a.profile, graph.hash());
  auto settings = sluice::planSettings(config);
  std::cerr << "sluice: partitioning " << graph.numNodes() << " nodes into " << settings.stages << " stages (method "
            << sluice::partition::partitionMethodName(settings.method) << ") ..." << std::endl;
  auto t0 = std::chrono::steady_clock::now();
  // Progress on a long search: each phase once 2 s have passed, at most one a second.
  double lastShown = 0;
  settings.progress = [&](const std::string& phase) {
    const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (at < 2 || at - lastShown < 1) return;
    lastShown = at;
    std::cerr << "sluice: partition: " << phase << " (" << static_cast<int>(at) << " s)" << std::endl;
  };
  if (!config.pipeline.cuts.empty()) settings.method = sluice::partition::PartitionMethod::Cuts;  // predictions for the user's own cuts
  std::string why;
  auto plan = sluice::makePlanFor(graph, profile, settings, config.pipeline.cuts, &why);
  if (!why.empty()) std::cerr << "sluice: " << why << std::endl;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  plan.save(a.output);
  std::cout << plan.table() << "planned in " << seconds << " s; wrote " << a.output << std::endl;
  return 0;
}

int runPlanShow(const sluice::CommandLine& a) {
  std::cout << sluice::partition::Plan::load(a.config).table();
  return 0;
}

int runTraceShow(const sluice::CommandLine& a) {
  sluice::SvgSize size;
  const std::string svg = sluice::timelineSvg(a.config, &size);
  sluice::writeFileAtomically(a.output, svg);
  std::cout << "wrote " << a.output << " (" << size.width << " x " << size.height << ")" << std::endl;
  return 0;
}

// The checkpoint's parameters and buffers, by module path, as safetensors:
// -o a directory (its model.safetensors, as from_pretrained reads) or a
// *.safetensors file.
int exportSafeTensors(const sluice::Config& config, const sluice::Manifest& manifest, const std::string& dir,
                      const std::string& output) {
  auto setup = sluice::makeModelSetup(config);
  // Tied names (one tensor under several module paths, e.g. an exported
  // model's lm_head.weight and transformer.wte.weight) are one tensor in the
  // checkpoint, under the name capture gave it: read once, written under each.
  std::set<std::string> saved;
  for (auto& f : manifest.files) saved.insert(f.tensors.begin(), f.tensors.end());
  std::map<const void*, std::vector<std::string>> aliases;
  const std::set<std::string> transient(setup.transientBuffers.begin(), setup.transientBuffers.end());
  for (auto& [name, tensor] : sluice::namedTensors(*setup.module)) {
    if (!transient.count(name)) aliases[tensor.unsafeGetTensorImpl()].push_back(name);
  }
  std::vector<std::string> names;
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // (the checkpoint's name, all names)
  for (auto& [impl, group] : aliases) {
    auto found = std::find_if(group.begin(), group.end(), [&](const std::string& n) { return saved.count(n) > 0; });
    names.push_back(found != group.end() ? *found : group.front());
    groups.emplace_back(names.back(), group);
  }
  // A buffer the model derives and the checkpoint lacks is written as the model builds it.
  auto state = sluice::loadCheckpoint(manifest, sluice::withoutDerivedBuffers(manifest, names, *setup.module), {}, 0,
                                      false);
  for (auto& n : names) {
    if (!state.tensors.count(n)) state.tensors[n] = setup.module->named_buffers()[n];
  }
  for (auto& [picked, group] : groups) {
    for (auto& n : group) state.tensors[n] = state.tensors.at(picked);
  }
  std::string file = output;
  if (fs::path(output).extension() != ".safetensors") {
    fs::create_directories(output);
    file = (fs::path(output) / "model.safetensors").string();
  }
  sluice::saveSafeTensors(file, state.tensors, {{"format", "pt"}, {"sluice_step", std::to_string(manifest.step)}});
  // A Hugging Face model's config.json beside its program (models/export_hf.py
  // writes one): copied, so from_pretrained(output) reads the directory.
  const auto hfConfig = fs::path(config.model.path).parent_path() / "config.json";
  if (config.model.kind == sluice::ModelKind::Exported && file != output && fs::is_regular_file(hfConfig)) {
    sluice::writeFileAtomically((fs::path(output) / "config.json").string(), sluice::readFile(hfConfig.string()));
    std::cout << "copied " << hfConfig.string() << " to " << output << std::endl;
  }
  std::cout << "wrote " << file << ": the " << state.tensors.size() << " parameters and buffers of " << dir
            << " (step " << manifest.step << ")" << std::endl;
  return 0;
}

// sluice export: the checkpoint's parameters and buffers (by module path)
// put into the module at model.path and saved to -o (torchscript,
// models/TorchScript.h), or written as safetensors (launcher/SafeTensors.h).
int runExport(const sluice::CommandLine& a) {
  auto config = sluice::Config::load(a.config, a.overrides);
  const bool torchscript = config.model.kind == sluice::ModelKind::TorchScript;
  const std::string format = !a.format.empty() ? a.format : torchscript ? "torchscript" : "safetensors";
  if (format == "torchscript" && !torchscript) {
    throw sluice::ConfigError("sluice export --format torchscript writes TorchScript models; " + a.config +
                              " has model.name " + sluice::modelName(config.model.kind) +
                              ": use --format safetensors (or resume its checkpoints with checkpoint.resume)");
  }
  if (a.checkpoint.empty() || a.output.empty()) {
    throw sluice::ConfigError("sluice: usage: sluice export CONFIG --checkpoint DIR -o OUTPUT [--format F]\n\n" +
                              sluice::commandLineUsage());
  }
  std::string dir = a.checkpoint;
  if (!fs::exists(fs::path(dir) / "manifest.yaml") && fs::exists(fs::path(dir) / "latest")) {
    config.checkpoint.dir = dir;
    config.checkpoint.resume = "auto";
    dir = sluice::resumeDirectory(config);
  }
  sluice::CheckpointLayout layout;
  layout.model = sluice::modelFields(config);
  const auto manifest = sluice::openCheckpoint(dir, layout);
  if (format == "safetensors") return exportSafeTensors(config, manifest, dir, a.output);
  const auto names = sluice::models::torchScriptTensorNames(config.model.path);
  const auto state = sluice::loadCheckpoint(manifest, names, {}, 0, false);
  sluice::models::exportModule(config.model.path, state.tensors, a.output);
  std::cout << "wrote " << a.output << ": " << config.model.path << " with the " << state.tensors.size()
            << " parameters and buffers of " << dir << " (step " << manifest.step << ")" << std::endl;
  return 0;
}

int runTrainOrWorker(const sluice::CommandLine& a, int argc, char** argv) {
  auto config = sluice::Config::load(a.config, a.overrides);  // validates before anything is written
  if (!sluice::Communicator::launchedByMpi()) {
    sluice::checkModelFitsMemory(config, config.worldSize());
    // A GPU job on a machine without one stops here, before any rank starts.
    if (a.command == "train" && config.job.device == sluice::DeviceKind::Cuda) {
      sluice::rankDevice(config.job.device, 0);
    }
  }
  // The job's launcher (or a single-process run) owns its outputs until it
  // exits: checked writable now, one job per directory (launcher/OutputLock.h).
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

// `sluice launch`: the job's ranks on several machines (launcher/ClusterLaunch.h).
int runLaunch(sluice::CommandLine a) {
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
  auto locks = sluice::lockJobOutputs(config, !sluice::resumeDirectory(config).empty());  // launcher/OutputLock.h
  std::cerr << "sluice: launching " << config.worldSize() << " ranks (" << where << "): " << line << std::endl;
  sluice::SupervisedJob job;
  job.plan = plan;
  job.maxRestarts = config.cluster.maxRestarts;
  job.ranks = config.worldSize();
  job.resumeHint = "sluice launch " + a.config + " (checkpoint.resume: auto resumes from " + config.checkpointDir() + ")";
  return sluice::superviseJob(job);
}

}  // namespace

int main(int argc, char** argv) {
  sluice::keepFreedMemoryInHeap();  // before the first large tensor (core/HeapPolicy.h)
  // A rank of a supervised job ends the moment its launcher does (Note [no orphans], launcher/LauncherWatch.h).
  if (sluice::Communicator::launchedByMpi()) sluice::watchLauncher();
  // A launcher keeps a stop that comes during its start-up (Supervisor.h);
  // the other commands keep the default (a signal ends them).
  if (argc >= 2 && !sluice::Communicator::launchedByMpi() &&
      (std::strcmp(argv[1], "train") == 0 || std::strcmp(argv[1], "launch") == 0 ||
       std::strcmp(argv[1], "profile") == 0)) {
    sluice::catchStopSignals();
  }
  try {
    const auto parsed = sluice::parseCommandLine(argc, argv);
    if (!parsed) return 0;  // --help
    const auto& a = *parsed;
    if (a.command == "version") return printVersion();
    if (a.command == "plan") return runPlanShow(a);
    if (a.command == "trace") return runTraceShow(a);
    if (a.command == "train" || a.command == "worker") return runTrainOrWorker(a, argc, argv);
    if (a.command == "launch") return runLaunch(a);
    if (a.command == "graph") return runGraph(a);
    if (a.command == "profile") return runProfile(a, argc, argv);
    if (a.command == "partition") return runPartition(a);
    if (a.command == "simulate") return sluice::runSimulate(a);
    if (a.command == "export") return runExport(a);
    throw sluice::ConfigError("sluice: unknown command '" + a.command + "'\n\n" + sluice::commandLineUsage());
  } catch (const sluice::ConfigError& e) {
    std::cerr << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "sluice: error: " << messageOf(e) << std::endl;
    return 1;
  }
}
