#include "cli/CommandLine.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <memory>

#include "core/Error.h"
#include "partition/PartitionMethod.h"

namespace sluice {
namespace {

// The parser and where its values go; built the same for parsing and for usage.
struct Parser {
  CLI::App app{"Pipeline-parallel training of LibTorch models: capture, profile, partition, train.", "sluice"};
  CommandLine args;
  bool version = false, trace = false;
  std::map<std::string, CLI::App*> commands;

  Parser() {
    app.set_help_flag("-h,--help", "print this help (and `sluice COMMAND --help` a command's)");
    app.add_flag("--version", version, "versions of Sluice, LibTorch, Open MPI and the BLAS in use");
    app.allow_extras();  // an unknown command is named by parseCommandLine
    app.require_subcommand(0, 1);
    auto* train = command("train", "train from a YAML config; starts mpirun itself when the config needs more than "
                                   "one rank");
    withConfig(train);
    withTrace(train);
    auto* worker = command("worker", "one rank of a job (what mpirun and srun start)");
    withConfig(worker);
    withTrace(worker);
    auto* launch = command("launch", "start the job on several machines: mpirun over a hostfile "
                                     "(cluster.hostfile) or srun inside a Slurm allocation (cluster.launcher)");
    withConfig(launch);
    withTrace(launch);
    launch->add_option("--hostfile", args.hostfile, "the hosts, one per line: HOST [slots=N] (cluster.hostfile)");
    launch->add_flag("--dry-run", args.dryRun, "print the command, start nothing");
    launch->add_option("--sbatch", args.sbatch, "write a Slurm batch script that runs this launch");
    auto* graph = command("graph", "capture the model and print one line per node (the indices pipeline.cuts "
                                   "refers to)");
    withConfig(graph);
    graph->add_option("-o", args.output, "also save the graph (protobuf)");
    auto* profile = command("profile", "time every node (forward, backward), saved-tensor bytes, p2p and swap "
                                       "bandwidth on 2 ranks; write a Profile (protobuf)");
    withConfig(profile);
    profile->add_option("-o", args.output, "the profile file to write (required)");
    auto* partition = command("partition", "choose the stage split and each saved tensor's keep / swap / "
                                           "recompute from a profile; write a Plan for pipeline.plan");
    withConfig(partition);
    partition->add_option("--profile", args.profile, "the profile from `sluice profile` (required)");
    partition->add_option("-o", args.output, "the plan file to write (required)");
    partition->add_option("--budget-mb", args.budgetMb, "memory per stage in MiB (default: memory.budget_mb)");
    partition->add_option("--method", args.method,
                          choiceNames(partition::partitionMethods()) + " (default: pipeline.partition.method)");
    addSimulate();
    auto* exporter = command("export", "a checkpoint's weights: a TorchScript model (model.name: torchscript; "
                                       "torch.jit.load) or a safetensors file (any model; safetensors.torch.load_file, model.weights)");
    withConfig(exporter);
    exporter->add_option("--checkpoint", args.checkpoint,
                         "a step_N checkpoint directory, or the checkpoint directory for its latest (required)");
    exporter->add_option("-o", args.output,
                         "where to write (required): torchscript, a model file; safetensors, a directory (its "
                         "model.safetensors) or a *.safetensors file");
    exporter->add_option("--format", args.format, "torchscript | safetensors (default: torchscript for model.name "
                                                  "torchscript, else safetensors)")
        ->check(CLI::IsMember({"torchscript", "safetensors"}));
    auto* plan = command("plan", "plans from `sluice partition`");
    plan->require_subcommand(1);
    plan->add_subcommand("show", "print a plan: one row per stage with its predictions")
        ->add_option("FILE", args.config, "the plan file")
        ->required();
    auto* traceCmd = command("trace", "timelines from `sluice train --trace`");
    traceCmd->require_subcommand(1);
    auto* show = traceCmd->add_subcommand("show", "draw a trace as an SVG timeline");
    show->add_option("TRACE", args.config, "trace.json")->required();
    show->add_option("-o", args.output, "the SVG file to write")->required();
    command("version", "the same as --version");
  }

  void addSimulate() {
    auto* c = command("simulate", "the step of a cluster you have not rented: partition a profile for it (or take "
                                  "stage times), simulate the schedules, print step time, bubble, memory and the "
                                  "critical path; start no rank");
    withConfig(c);
    auto& s = args.simulate;
    c->add_option("--profile", args.profile, "the profile from `sluice profile` (with CONFIG)");
    c->add_option("--stage-times", s.stageTimes, "instead of CONFIG and --profile: per stage forward, input-"
                                                 "gradient and weight-gradient backward, in ms (one triple for "
                                                 "every stage, or one per stage separated by ;)")
        ->type_name("F,B,W[;F,B,W...]");
    c->add_option("--transfer-ms", s.transferMs, "with --stage-times: one boundary message's time (default 0)")
        ->check(CLI::NonNegativeNumber);
    c->add_option("--schedule", s.schedule, "a schedule or auto: every candidate (pipeline.schedule)");
    c->add_option("--ranks", s.ranks, "pipeline ranks p (pipeline.stages)")->check(CLI::Range(1, 1 << 16));
    c->add_option("--micro-batches", s.microBatches, "micro-batches m per step (pipeline.microbatches)")
        ->check(CLI::Range(1, 1 << 20));
    c->add_option("--chunks", s.chunks, "stages per rank under interleaved schedules (pipeline.chunks)")
        ->check(CLI::Range(1, 64));
    c->add_option("--link-gbps", s.linkGBps, "the point-to-point link's bandwidth in GB/s (default: the profile's)")
        ->check(CLI::PositiveNumber);
    c->add_option("--latency-us", s.latencyUs, "the link's latency in microseconds (default: the profile's)")
        ->check(CLI::NonNegativeNumber);
    c->add_option("--collective-gbps", s.collectiveGBps,
                  "with pipeline.data_parallel > 1: the bandwidth of DistAdam's reduce-scatters and all-gathers "
                  "in GB/s (default: the link's)")
        ->check(CLI::PositiveNumber);
    c->add_option("--memory-gb", s.memoryGb, "device memory per rank in GB (memory.budget_mb)")
        ->check(CLI::PositiveNumber);
    c->add_option("--speed", s.speed, "the device's speed over the profile's: its times are divided by it "
                                      "(default 1, the profile's own device)")
        ->check(CLI::PositiveNumber);
    c->add_option("--cores", s.cores, "the ranks share N CPU cores of one host (CPU jobs with more rank threads "
                                      "than cores): ranks computing together slow down to share them (default: "
                                      "every rank has its own device)")
        ->check(CLI::Range(1, 1 << 20));
    c->add_option("--trace", s.trace, "write the chosen schedule's simulated step as a trace (trace.json format: "
                                      "`sluice trace show`, Perfetto)");
  }

  CLI::App* command(const std::string& name, const std::string& summary) {
    auto* c = app.add_subcommand(name, summary);
    c->allow_extras();  // a flag of another command is named by parseCommandLine
    commands[name] = c;
    return c;
  }
  void withConfig(CLI::App* c) {
    c->add_option("CONFIG", args.config, "the job's YAML config");
    c->add_option("--set", args.overrides, "override a config key, e.g. training.steps=100 (repeatable)")
        ->type_name("KEY=VALUE")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  void withTrace(CLI::App* c) {
    c->add_flag("--trace", trace, "write a timeline of two steps to output_dir/trace.json (logging.trace)");
  }

  // The flags of every command, to say whether another command takes `flag`.
  bool someCommandTakes(std::string flag) const {
    flag = flag.substr(0, flag.find('='));
    const bool isLong = flag.rfind("--", 0) == 0;
    const std::string bare = flag.substr(isLong ? 2 : 1);
    for (auto& [name, c] : commands) {
      for (const auto* o : c->get_options()) {
        if (isLong ? o->check_lname(bare) : o->check_sname(bare)) return true;
      }
    }
    return false;
  }
};

}  // namespace

std::string commandLineUsage() {
  Parser p;
  return p.app.help();
}

std::optional<CommandLine> parseCommandLine(int argc, char** argv) {
  Parser p;
  if (argc < 2) throw ConfigError(p.app.help());
  if (std::string(argv[1]) == "help") {
    std::cout << p.app.help();
    return std::nullopt;
  }
  // An unknown command with --help: CLI11 would answer the general help and
  // exit 0, as if the command existed.
  const std::string first = argv[1];
  bool known = false;
  for (const auto* sub : p.app.get_subcommands([](CLI::App*) { return true; })) known = known || sub->get_name() == first;
  if (!first.empty() && first[0] != '-' && !known) {
    throw ConfigError("sluice: unknown command '" + first + "'\n\n" + p.app.help());
  }
  try {
    p.app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << p.app.help();  // the chosen (sub)command's, its usage line headed "sluice <command>"
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string("sluice: ") + e.what() + "\n\n" + p.app.help());
  }
  auto& a = p.args;
  const auto chosen = p.app.get_subcommands();
  if (p.version) {
    a.command = "version";
    return a;
  }
  if (chosen.empty()) {
    const auto extra = p.app.remaining();
    throw ConfigError("sluice: unknown command '" + (extra.empty() ? std::string() : extra.front()) + "'\n\n" +
                      p.app.help());
  }
  auto* command = chosen.front();
  a.command = command->get_name();
  if (const auto extra = command->remaining(); !extra.empty()) {
    const auto& first = extra.front();
    if (!first.empty() && first[0] == '-') {
      throw ConfigError("sluice: " + a.command + " does not take " + first +
                        (p.someCommandTakes(first) ? " (another command does; see `sluice --help`)"
                                                   : ": unknown option") +
                        "\n\n" + command->help("sluice"));
    }
    throw ConfigError("sluice: unexpected argument '" + first + "'\n\n" + command->help("sluice"));
  }
  if (p.trace) a.overrides.push_back("logging.trace=true");
  const bool needsConfig = a.command != "version" && a.command != "plan" && a.command != "trace" &&
                           !(a.command == "simulate" && !a.simulate.stageTimes.empty());
  if (needsConfig && a.config.empty()) {
    throw ConfigError("sluice: " + a.command + " needs a CONFIG file\n\n" + command->help("sluice"));
  }
  return a;
}

}  // namespace sluice
