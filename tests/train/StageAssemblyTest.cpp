// Stage assembly (train/StageAssembly.h) without ranks: the schedule a job
// runs against its plan (fitted to the plan's stage times only when the job
// runs what the plan was made for), and a rank's stage made into its
// RankWorker with the optimizer over every parameter it trains.
#include <gtest/gtest.h>

#include <set>

#include "config/Config.h"
#include "core/GraphSplit.h"
#include "pipeline/ScheduleKinds.h"
#include "pipeline/StageWorker.h"
#include "train/ModelFromConfig.h"
#include "train/StageAssembly.h"

namespace sluice {
namespace {

// A zb-h1 plan for 3 stages and 4 micro-batches whose stage times make the
// fitted order differ from the unit-cost one (light forwards with heavy
// weight gradients between heavy forwards with next to none).
partition::Plan unevenZeroBubblePlan() {
  partition::Plan plan;
  plan.schedule = &pipeline::scheduleKind("zb-h1");
  plan.microBatches = 4;
  plan.stages.resize(3);
  for (int k : {0, 2}) {
    plan.stages[k].scheduleForward = 1, plan.stages[k].scheduleBackwardInput = 1, plan.stages[k].scheduleBackwardWeight = 4;
  }
  plan.stages[1].scheduleForward = 3, plan.stages[1].scheduleBackwardInput = 3, plan.stages[1].scheduleBackwardWeight = 0.1;
  return plan;
}

Config pipelineConfig(const std::string& schedule, int microBatches) {
  Config c;
  c.pipeline.stages = 3;
  c.pipeline.microbatches = microBatches;
  c.pipeline.schedule = parseScheduleSetting(schedule);
  return c;
}

TEST(StageAssembly, TheJobRunsThePlansFittedScheduleOnlyWhenItRunsWhatThePlanWasMadeFor) {
  const auto plan = unevenZeroBubblePlan();
  const auto costs = plan.scheduleCosts();
  ASSERT_TRUE(costs.has_value());
  const auto fitted = pipeline::makeSchedule("zb-h1", 3, 4, 1, &*costs);
  const auto unit = pipeline::makeSchedule("zb-h1", 3, 4);
  ASSERT_NE(fitted.actions, unit.actions) << "the test's stage times must change the order";
  EXPECT_EQ(jobSchedule(pipelineConfig("zb-h1", 4), &plan, 1).actions, fitted.actions);
  EXPECT_EQ(jobSchedule(pipelineConfig("auto", 4), &plan, 1).actions, fitted.actions) << "auto runs the plan's pick";
  auto noFit = pipelineConfig("zb-h1", 4);
  noFit.pipeline.fitSchedule = false;
  EXPECT_EQ(jobSchedule(noFit, &plan, 1).actions, unit.actions);
  // Other micro-batches, another schedule, no plan: the unit-cost order of what the job runs.
  EXPECT_EQ(jobSchedule(pipelineConfig("zb-h1", 8), &plan, 1).actions, pipeline::makeSchedule("zb-h1", 3, 8).actions);
  const auto oneF1B = jobSchedule(pipelineConfig("1f1b", 4), &plan, 1);
  EXPECT_EQ(oneF1B.name, "1f1b");
  EXPECT_EQ(oneF1B.actions, pipeline::makeSchedule("1f1b", 3, 4).actions);
  EXPECT_EQ(jobSchedule(pipelineConfig("auto", 4), nullptr, 1).name, "1f1b") << "auto without a plan";
}

TEST(StageAssembly, ARanksStageBecomesItsWorkerAndTheOptimizerTrainsAllItsParameters) {
  auto c = Config::fromYamlText(
      "job: {output_dir: /tmp/x}\nmodel: {name: gpt, layers: 2, heads: 2, embd: 16, block_size: 8}\n"
      "training: {steps: 1, global_batch_size: 4, micro_batch_size: 2}\npipeline: {stages: 1, microbatches: 2}\n");
  auto setup = makeModelSetup(c);
  const auto graph = setup.capture(c.training.microBatchSize);
  const auto stages = splitGraph(graph, {});
  const std::vector<memory::MemoryPlan> plans(1);
  const auto schedule = jobSchedule(c, nullptr, 1);
  const auto self = Communicator::self();
  const auto boundaries = pipeline::boundaryCommunicators(self, schedule);
  auto assembled = assembleWorker(c, {&stages, &plans, &setup, c10::Device(c10::kCPU)}, self, schedule, boundaries);
  ASSERT_EQ(assembled.worker->size(), 1u);
  EXPECT_EQ(assembled.worker->stage(0).stage().index, 0);
  EXPECT_EQ(assembled.worker->stage(0).stage().endNode, graph.numNodes());
  EXPECT_FALSE(assembled.sharedSwapEngine) << "no stage swaps";
  std::set<std::string> read;
  for (const auto& s : stages) read.insert(s.paramInputs.begin(), s.paramInputs.end());
  const auto trained = assembled.worker->trainableParameters();
  EXPECT_EQ(trained.size(), read.size()) << "every parameter the stage reads, once";
  EXPECT_EQ(trained.size(), setup.module->parameters().size()) << "one stage reads the whole model";
  auto optimizer = assembleOptimizer(c, *assembled.worker, self);
  size_t inOptimizer = 0;
  for (const auto& group : optimizer->optimizer().param_groups()) inOptimizer += group.params().size();
  EXPECT_EQ(inOptimizer, trained.size());
}

}  // namespace
}  // namespace sluice
