// launcher::CommandLine: the `sluice` command line, parsed by CLI11.
//
// One subcommand per job (train, worker, launch, graph, profile, partition,
// export, plan show, trace show, version, help), each with its own flags and
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

struct CommandLine {
  std::string command;  // train | worker | launch | graph | profile | partition | export | plan | trace | version
  std::string config;   // CONFIG (the YAML file), or the FILE of plan show / trace show
  std::string output, profile, method, budgetMb, hostfile, sbatch, checkpoint, format;
  bool dryRun = false;
  std::vector<std::string> overrides;  // --set key=value, in order (--trace adds logging.trace=true)
};

std::optional<CommandLine> parseCommandLine(int argc, char** argv);

// The top-level usage: every command with its one-line summary.
std::string commandLineUsage();

}  // namespace sluice
