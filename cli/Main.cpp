// The `sluice` command line. Library code throws; this file turns errors into
// a message and an exit code (2: bad config or usage, 1: failure at run time)
// and runs the command's row of cli/Commands.h.
#include <c10/util/Exception.h>

#include <cstring>
#include <iostream>

#include "cli/Commands.h"
#include "core/Communicator.h"
#include "core/Error.h"
#include "core/HeapPolicy.h"
#include "launch/LauncherWatch.h"
#include "launch/Supervisor.h"

namespace sluice::cli {

// LibTorch's errors carry a C++ backtrace in what(); users get the message.
std::string messageOf(const std::exception& e) {
  if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
  sluice::keepFreedMemoryInHeap();  // before the first large tensor (core/HeapPolicy.h)
  // A rank of a supervised job ends the moment its launcher does (Note [no orphans], launch/LauncherWatch.h).
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
    for (const auto& row : sluice::cli::kCommands) {
      if (parsed->command == row.name) return row.run(*parsed, argc, argv);
    }
    throw sluice::ConfigError("sluice: unknown command '" + parsed->command + "'\n\n" + sluice::commandLineUsage());
  } catch (const sluice::ConfigError& e) {
    std::cerr << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "sluice: error: " << sluice::cli::messageOf(e) << std::endl;
    return 1;
  }
}
