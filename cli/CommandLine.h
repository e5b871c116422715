// cli::CommandLine: the `sluice` command line, parsed by CLI11.
//
// One subcommand per job (train, worker, launch, graph, profile, partition,
// simulate, export, plan show, trace show, version, help), each with its own flags and
// `--help`. A flag another command takes is refused with the command named
// ("sluice: train does not take -o (another command does; ...)"), an unknown
// command too; both throw ConfigError carrying the usage (exit 2).
//
//   auto args = parseCommandLine(argc, argv);   // nullopt: help was printed (exit 0)
//   if (args->command == "train") ...
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sluice {

// `sluice simulate`'s own flags (cli/Simulate.h); 0 or empty: not given.
struct SimulateArgs {
  std::string stageTimes;  // --stage-times "F,B,W[;F,B,W...]" in ms (instead of CONFIG and --profile)
  std::string schedule;    // --schedule NAME | auto (pipeline.schedule)
  int ranks = 0, microBatches = 0, chunks = 0;  // --ranks, --micro-batches, --chunks
  double transferMs = 0;                        // --transfer-ms: one message's time with --stage-times
  double linkGBps = 0, latencyUs = -1;          // --link-gbps, --latency-us: the p2p link (default: the profile's)
  double collectiveGBps = 0;                    // --collective-gbps: DistAdam's reduce-scatter / all-gather
  double memoryGb = 0;                          // --memory-gb: device memory per rank (memory.budget_mb)
  double speed = 0;                             // --speed: the device's speed over the profile's (default 1)
  int cores = 0;                                // --cores: the ranks share this many CPU cores (0: not shared)
  std::string trace;                            // --trace FILE: the simulated timeline (trace.json format)
};

struct CommandLine {
  std::string command;  // train | worker | launch | graph | profile | partition | simulate | export | plan | trace | version
  std::string config;   // CONFIG (the YAML file), or the FILE of plan show / trace show
  std::string output, profile, method, budgetMb, hostfile, sbatch, checkpoint, format;
  bool dryRun = false;
  SimulateArgs simulate;
  std::vector<std::string> overrides;  // --set key=value, in order (--trace adds logging.trace=true)
};

std::optional<CommandLine> parseCommandLine(int argc, char** argv);

// The top-level usage: every command with its one-line summary.
std::string commandLineUsage();

}  // namespace sluice
