// cli: the `sluice` commands, one file each (cli/<Name>Command.cpp), and the
// table Main.cpp dispatches on.
//
// A command takes the parsed command line (cli/CommandLine.h) and, for the
// ones that start MPI in this process (profile, train, worker), main's argc
// and argv; it returns the exit code and throws on error: ConfigError for a
// bad config, flag or file (exit 2), anything else for a failure at run time
// (exit 1). Adding a command: its flags in CommandLine.cpp, its file here,
// and one row of kCommands.
#pragma once

#include <exception>
#include <string>

#include "cli/CommandLine.h"

namespace sluice::cli {

using Command = int (*)(const CommandLine& line, int argc, char** argv);

struct CommandRow {
  const char* name;  // CommandLine::command
  Command run;
};

int versionCommand(const CommandLine& line, int argc, char** argv);
int graphCommand(const CommandLine& line, int argc, char** argv);
int profileCommand(const CommandLine& line, int argc, char** argv);
int partitionCommand(const CommandLine& line, int argc, char** argv);
int simulateCommand(const CommandLine& line, int argc, char** argv);
int planShowCommand(const CommandLine& line, int argc, char** argv);
int traceShowCommand(const CommandLine& line, int argc, char** argv);
int exportCommand(const CommandLine& line, int argc, char** argv);
int trainCommand(const CommandLine& line, int argc, char** argv);  // train and worker
int launchCommand(const CommandLine& line, int argc, char** argv);

inline constexpr CommandRow kCommands[] = {
    {"version", versionCommand},     {"graph", graphCommand},   {"profile", profileCommand},
    {"partition", partitionCommand}, {"simulate", simulateCommand}, {"plan", planShowCommand},
    {"trace", traceShowCommand},     {"export", exportCommand}, {"train", trainCommand},
    {"worker", trainCommand},        {"launch", launchCommand},
};

// An error's message for the user: LibTorch's without its C++ backtrace.
std::string messageOf(const std::exception& e);

}  // namespace sluice::cli
