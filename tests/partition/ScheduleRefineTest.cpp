// Plans for zb-h1, interleaved and interleaved-zb (memory policies plan and
// none) on a captured GPT with
// random per-node times: the profile method's cuts are a local optimum of the
// schedule's simulated step (no single cut moved by up to kRefineReach nodes,
// planned here through planForCuts, predicts a shorter step), never worse than
// the cuts of the 1F1B objective, and strictly better on some profiles. And
// training builds the schedule the plan's step time was simulated on (with
// the refill after waits the plan charges, Note [refill after a wait]).
#include <gtest/gtest.h>

#include "core/Error.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
#include "pipeline/ScheduleKinds.h"
#include "tests/TestUtil.h"

namespace sluice::partition {
namespace {

TEST(ScheduleAwarePlan, CutsAreALocalOptimumOfTheSimulatedStep) {
  torch::manual_seed(0);
  auto gpt = models::Gpt(test::tinyGpt(4));
  auto graph = test::captureGpt(gpt, 2, 8);
  const int n = graph.numNodes();
  int better = 0, checked = 0;
  for (int trial = 0; trial < 4; ++trial) {
    const auto profile = test::randomTimesProfile(graph);
    // Policy none: fixed choices, where the partitioner does not check cuts itself.
    for (int c = 0; c < 6; ++c) {
      const char* schedule = c / 2 == 0 ? "zb-h1" : c / 2 == 1 ? "interleaved" : "interleaved-zb";
      const int chunks = c / 2 == 0 ? 1 : 2;
      PlanSettings st;
      st.policy = c % 2 ? memory::MemoryPolicy::None : memory::MemoryPolicy::Plan;
      st.stages = 2;
      st.microBatches = 4;
      st.schedule = pipeline::ScheduleChoice::of(pipeline::scheduleKind(schedule));
      st.chunks = chunks;
      st.minOpLevelGain = 0;  // the op-level optimum (layer boundaries first: LayerCutsTest)
      const auto plan = makePlan(graph, profile, st);
      const auto cuts = plan.cuts();
      ASSERT_EQ(static_cast<int>(cuts.size()), 2 * chunks - 1);
      EXPECT_NEAR(planForCuts(graph, profile, st, cuts).stepTime, plan.stepTime, 1e-12);
      // The 1F1B objective's cuts (the DP's, before refinement), predicted under this schedule.
      PlanSettings ofob = st;
      ofob.schedule = pipeline::ScheduleChoice::of(pipeline::scheduleKind("1f1b"));
      ofob.stages = st.stages * chunks;
      ofob.chunks = 1;
      const double dp = planForCuts(graph, profile, st, makePlan(graph, profile, ofob).cuts()).stepTime;
      EXPECT_LE(plan.stepTime, dp * (1 + 1e-12)) << schedule << ", trial " << trial;
      if (plan.stepTime < dp * (1 - 1e-9)) ++better;
      for (size_t k = 0; k < cuts.size(); ++k) {
        for (int delta = -kRefineReach; delta <= kRefineReach; ++delta) {
          auto moved = cuts;
          moved[k] += delta;
          if (delta == 0 || moved[k] <= (k ? moved[k - 1] : 0) || moved[k] >= (k + 1 < cuts.size() ? moved[k + 1] : n)) {
            continue;
          }
          try {
            const double step = planForCuts(graph, profile, st, moved).stepTime;
            EXPECT_GE(step, plan.stepTime * (1 - 1e-9)) << schedule << ", trial " << trial << ": cut " << k << " moved by "
                                                       << delta << " predicts a shorter step";
            ++checked;
          } catch (const GraphError&) {  // not a valid cut
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(better, 0) << "refinement never beat the 1F1B objective's cuts";
}

// What training runs is what the plan predicted: the zero-bubble schedules are
// fitted to the stage times the plan records (Plan::scheduleCosts), which
// survive the plan file, and that schedule simulates to the plan's step time.
// Other schedules record none.
TEST(ScheduleAwarePlan, TrainingBuildsTheScheduleThePlanPredicted) {
  torch::manual_seed(0);
  auto gpt = models::Gpt(test::tinyGpt(4));
  auto graph = test::captureGpt(gpt, 2, 8);
  int fitted = 0;
  for (int trial = 0; trial < 4; ++trial) {
    auto profile = test::randomTimesProfile(graph);
    if (trial % 2) {  // Note [refill after a wait]: charged in the same simulation
      profile.refill.waitSeconds = 1e-3;
      profile.refill.pieces = {{0, 40, 0.1}, {40, graph.numNodes(), 0.02}};
    }
    for (const char* schedule : {"zb-h1", "interleaved-zb", "1f1b", "interleaved"}) {
      PlanSettings st;
      st.stages = 2;
      st.microBatches = 8;
      st.schedule = pipeline::ScheduleChoice::of(pipeline::scheduleKind(schedule));
      st.chunks = pipeline::scheduleKind(schedule).interleaves ? 2 : 1;
      const auto made = makePlan(graph, profile, st);
      const auto plan = Plan::fromBytes(made.toBytes(), "test");
      const auto costs = plan.scheduleCosts();
      if (!pipeline::scheduleKind(schedule).fitsStageTimes) {
        EXPECT_FALSE(costs.has_value()) << schedule;
        continue;
      }
      ASSERT_TRUE(costs.has_value()) << schedule;
      ASSERT_EQ(costs->times.size(), plan.stages.size());
      const auto run = pipeline::makeSchedule(schedule, st.stages, st.microBatches, st.chunks, &*costs);
      EXPECT_NEAR(pipeline::simulateStepWithRefill(run, costs->times, costs->comm, plan.refillCosts()).stepTime,
                  plan.stepTime, 1e-12 * plan.stepTime)
          << schedule << ", trial " << trial;
      EXPECT_EQ(plan.refillCosts().charged(), trial % 2 == 1);
      const auto unit = pipeline::makeSchedule(schedule, st.stages, st.microBatches, st.chunks);
      fitted += !(run.actions == unit.actions);
    }
  }
  EXPECT_GT(fitted, 0) << "no plan's times gave a schedule other than the unit-cost one";
}

}  // namespace
}  // namespace sluice::partition
