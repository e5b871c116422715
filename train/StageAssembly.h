// train::StageAssembly: a rank's stages made into what runs them, from plain
// inputs (the trainer's buildStage phase calls these in order):
//   jobSchedule        the schedule the job runs: the plan's (fitted to its
//                      stage times, as its prediction was: Plan::runSchedule)
//                      when the job runs the schedule, chunks and micro-batches
//                      the plan was made for; else the configured row (or the
//                      plan's under pipeline.schedule auto) at unit costs;
//   assembleWorker     one StageWorker per stage of the rank, each with its
//                      memory plan; a rank whose stages swap shares one swap
//                      engine among them (one window, one I/O thread, as the
//                      plan's rank peak counts it); the RankWorker over them;
//   assembleOptimizer  the optimizer (optimizer.*) over the worker's
//                      trainable parameters, DistAdam sharded over `dataParallel`.
// Tested without ranks in tests/train/StageAssemblyTest.cpp.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <vector>

#include "config/Config.h"
#include "core/Communicator.h"
#include "core/GraphSplit.h"
#include "memory/MemoryPlan.h"
#include "models/ModelSetup.h"
#include "optim/TrainingOptimizer.h"
#include "partition/Plan.h"
#include "pipeline/RankWorker.h"
#include "pipeline/Schedule.h"

namespace sluice {

// `chunks`: the stages per rank the job runs (chunksOf, train/Planning.h).
pipeline::Schedule jobSchedule(const Config& config, const partition::Plan* plan, int chunks);

struct AssembledWorker {
  std::unique_ptr<pipeline::RankWorker> worker;
  bool sharedSwapEngine = false;  // several of the rank's stages swap, through one engine
};

// The rank's stages and their memory plans, in the same order.
struct RankStagesToRun {
  const std::vector<StageGraph>* stages = nullptr;
  const std::vector<memory::MemoryPlan>* memoryPlans = nullptr;
  const ModelSetup* setup = nullptr;  // the parameters the stages read, the loss, the compute dtype
  c10::Device device = c10::Device(c10::kCPU);
};

AssembledWorker assembleWorker(const Config& config, const RankStagesToRun& rank, const Communicator& pipelineComm,
                               const pipeline::Schedule& schedule, const std::vector<Communicator>& boundaryComms);

std::unique_ptr<optim::TrainingOptimizer> assembleOptimizer(const Config& config, const pipeline::RankWorker& worker,
                                                            const Communicator& dataParallel);

}  // namespace sluice
