// `sluice partition CONFIG --profile FILE -o PLAN`: the plan for a profile, with its table.
#include "cli/Commands.h"

#include <chrono>
#include <iostream>

#include "config/Config.h"
#include "core/Error.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
#include "train/ModelFromConfig.h"
#include "train/Planning.h"

namespace sluice::cli {

// The flags win over the config: --method over pipeline.partition.method,
// --budget-mb over memory.budget_mb (both checked like config values).
int partitionCommand(const CommandLine& given, int, char**) {
  CommandLine a = given;
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
  auto plan = sluice::partition::makePlanFor(graph, profile, settings, config.pipeline.cuts, &why);
  if (!why.empty()) std::cerr << "sluice: " << why << std::endl;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  plan.save(a.output);
  std::cout << plan.table() << "planned in " << seconds << " s; wrote " << a.output << std::endl;
  return 0;
}

}  // namespace sluice::cli
