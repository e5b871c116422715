#include "train/StageAssembly.h"

#include <algorithm>

#include "core/Log.h"
#include "memory/SwapEngine.h"
#include "memory/SwapTier.h"
#include "pipeline/ScheduleKinds.h"
#include "train/Planning.h"

namespace sluice {

pipeline::Schedule jobSchedule(const Config& c, const partition::Plan* plan, int chunks) {
  const auto& kind = scheduleOf(c, plan);
  if (plan && plan->schedule == &kind && plan->chunks == chunks && plan->microBatches == c.pipeline.microbatches) {
    return plan->runSchedule(c.pipeline.fitSchedule);
  }
  return pipeline::makeSchedule(kind, c.pipeline.stages, c.pipeline.microbatches, chunks);
}

namespace {

// Several stages per rank that swap: one engine for all of them; else none
// (each swapping stage starts its own).
std::shared_ptr<memory::SwapEngine> rankSwapEngine(const Config& c, const std::vector<memory::MemoryPlan>& plans,
                                                   const c10::Device& device) {
  int swappingStages = 0;
  int64_t window = 0;
  for (const auto& mp : plans) {
    if (!mp.swaps()) continue;
    ++swappingStages;
    window = std::max(window, mp.swapWindowBytes);
  }
  if (swappingStages < 2) return nullptr;
  return memory::SwapEngine::start(memory::makeSwapTier(device, swapDir(c)), window);
}

void logMemoryPlan(const pipeline::StageWorker& worker, const memory::MemoryPlan& plan) {
  int swaps = 0, recomputes = 0;
  for (const auto& d : plan.decisions) (d.action == memory::TensorAction::Swap ? swaps : recomputes)++;
  log::info("stage " + std::to_string(worker.stage().index) + " memory plan: " + std::to_string(swaps) +
            " storages swapped" + (swaps ? " to " + worker.memory()->swapDescription() : "") + ", " +
            std::to_string(recomputes) + " recomputed");
}

}  // namespace

AssembledWorker assembleWorker(const Config& c, const RankStagesToRun& rank, const Communicator& pipelineComm,
                               const pipeline::Schedule& schedule, const std::vector<Communicator>& boundaryComms) {
  const auto& stages = *rank.stages;
  const auto& plans = *rank.memoryPlans;
  const auto& setup = *rank.setup;
  auto engine = rankSwapEngine(c, plans, rank.device);
  std::vector<std::unique_ptr<pipeline::StageWorker>> workers;
  for (size_t i = 0; i < stages.size(); ++i) {
    workers.push_back(std::make_unique<pipeline::StageWorker>(stages[i], setup.tensorsByName(stages[i].paramInputs),
                                                              pipelineComm, schedule, setup.loss, c.pipeline.execution,
                                                              boundaryComms, rank.device));
    auto& worker = *workers.back();
    if (c.pipeline.boundaryDtype == BoundaryDtype::Compute) worker.setBoundaryType(setup.computeType);
    if (plans.at(i).freesAnything()) {
      worker.setMemoryPlan(plans[i], swapDir(c), engine);
      logMemoryPlan(worker, plans[i]);
    }
  }
  AssembledWorker out;
  out.sharedSwapEngine = engine != nullptr;
  out.worker = std::make_unique<pipeline::RankWorker>(std::move(workers));
  // Note [reader gradients] (pipeline/RankWorker.h): not under DistAdam's
  // hooks mode, whose reduce-scatters start from each parameter's own accumulation.
  if (c.optimizer.name != optim::OptimizerKind::DistAdam || c.optimizer.distAdamMode != optim::DistAdamMode::Hooks) {
    out.worker->separateReaderGradients();
  }
  return out;
}

std::unique_ptr<optim::TrainingOptimizer> assembleOptimizer(const Config& c, const pipeline::RankWorker& worker,
                                                            const Communicator& dataParallel) {
  optim::OptimizerOptions o;
  o.kind = c.optimizer.name;
  o.adamw = torch::optim::AdamWOptions(c.optimizer.lr)
                .betas({c.optimizer.beta1, c.optimizer.beta2})
                .eps(c.optimizer.eps)
                .weight_decay(c.optimizer.weightDecay);
  o.distAdamMode = c.optimizer.distAdamMode;
  o.bucketBytes = static_cast<int64_t>(c.optimizer.distAdamBucketMb * 1048576.0);
  o.expectedRanks = c.pipeline.dataParallel;
  o.accumulationSteps = c.pipeline.microbatches;  // reduce on the last micro-batch's backward
  o.readers = worker.readersOfTrainableParameters();
  auto optimizer = optim::makeTrainingOptimizer(o, worker.trainableParameters(), dataParallel);
  if (o.kind == optim::OptimizerKind::DistAdam) log::info(optimizer->describe());
  return optimizer;
}

}  // namespace sluice
