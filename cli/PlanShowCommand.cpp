// `sluice plan show PLAN`: one row per stage.
#include "cli/Commands.h"

#include <iostream>

#include "partition/Plan.h"

namespace sluice::cli {

int planShowCommand(const CommandLine& a, int, char**) {
  std::cout << sluice::partition::Plan::load(a.config).table();
  return 0;
}

}  // namespace sluice::cli
