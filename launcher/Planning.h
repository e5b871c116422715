// launcher planning: from a Config to a Profile and a Plan.
//
// profileModel() profiles the captured graph on a real micro-batch of the
// configured shape (rank-local; the caller supplies the machine numbers).
// planSettings() maps the config (pipeline.*, memory.budget_mb, optimizer)
// onto partition::PlanSettings. planForJob() is what every training rank
// calls (collective over `world`): it loads pipeline.plan and checks it
// against the graph, or, without one, has rank 0 profile and partition with
// pipeline.partition.method and broadcasts the plan bytes, so all ranks run
// the same plan. memoryPlanFor() turns a stage's share of a plan into the
// runtime memory plan (memory/) its StageWorker carries out. Throws PlanError /
// ConfigError.
#pragma once

#include <string>

#include "core/Communicator.h"
#include "core/OpGraph.h"
#include "launcher/Config.h"
#include "launcher/ModelSetup.h"
#include "memory/MemoryPlan.h"
#include "partition/Plan.h"
#include "partition/Profile.h"

namespace sluice {

partition::Profile profileModel(const Config& config, const ModelSetup& setup, const OpGraph& graph);
partition::PlanSettings planSettings(const Config& config);
partition::Plan planForJob(const Config& config, const ModelSetup& setup, const OpGraph& graph,
                           const Communicator& world, const std::string& scratchDir);
// memory.swap_window_mb in bytes (0: budget / 8, or 64 MiB without a budget).
int64_t swapWindowBytes(const Config& config);
// memory.swap_dir, or the default (on disk, never tmpfs).
std::string swapDir(const Config& config);
// What one stage's worker carries out: the plan's decisions for that stage.
memory::MemoryPlan memoryPlanFor(const partition::Plan& plan, int stage, const Config& config);

}  // namespace sluice
