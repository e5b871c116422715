// train::Planning: from a Config to a Profile and a Plan.
//
// profileModel() profiles the captured graph on a real micro-batch of the
// configured shape on every rank of `comm` at once, averages the times over
// them and measures the refill after a wait (Note [refill after a wait],
// partition/Refill.h); the caller supplies the machine numbers.
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
#include <vector>

#include "core/Communicator.h"
#include "core/OpGraph.h"
#include "config/Config.h"
#include "models/ModelSetup.h"
#include "memory/MemoryPlan.h"
#include "partition/AutoSchedule.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {

// comm: the ranks profiling at once (collective: they start the whole passes
// together; each gets the averaged profile).
partition::Profile profileModel(const Config& config, const ModelSetup& setup, const OpGraph& graph,
                                const Communicator& comm);
partition::PlanSettings planSettings(const Config& config);
// The schedule a job runs: pipeline.schedule, or with auto the plan's choice (1f1b without a plan).
const pipeline::ScheduleKind& scheduleOf(const Config& config, const partition::Plan* plan);
// Its stages per rank: pipeline.chunks, or with auto the plan's (1 without a plan).
int chunksOf(const Config& config, const partition::Plan* plan);
partition::Plan planForJob(const Config& config, const ModelSetup& setup, const OpGraph& graph,
                           const Communicator& world, const std::string& scratchDir);
// memory.swap_window_mb in bytes (0: budget / 8, or 64 MiB without a budget).
int64_t swapWindowBytes(const Config& config);
// memory.swap_dir, or the default (on disk, never tmpfs).
std::string swapDir(const Config& config);
// What one stage's worker carries out: the plan's decisions for that stage.
memory::MemoryPlan memoryPlanFor(const partition::Plan& plan, int stage, const Config& config);

}  // namespace sluice
