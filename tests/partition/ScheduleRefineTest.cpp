// Plans for zb-h1, interleaved and interleaved-zb (memory policies plan and
// none) on a captured GPT with
// random per-node times: the profile method's cuts are a local optimum of the
// schedule's simulated step (no single cut moved by up to kRefineReach nodes,
// planned here through planForCuts, predicts a shorter step), never worse than
// the cuts of the 1F1B objective, and strictly better on some profiles.
#include <gtest/gtest.h>

#include "core/Error.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
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
      st.policy = c % 2 ? "none" : "plan";
      st.stages = 2;
      st.microBatches = 4;
      st.schedule = schedule;
      st.chunks = chunks;
      const auto plan = makePlan(graph, profile, st);
      const auto cuts = plan.cuts();
      ASSERT_EQ(static_cast<int>(cuts.size()), 2 * chunks - 1);
      EXPECT_NEAR(planForCuts(graph, profile, st, cuts).stepTime, plan.stepTime, 1e-12);
      // The 1F1B objective's cuts (the DP's, before refinement), predicted under this schedule.
      PlanSettings ofob = st;
      ofob.schedule = "1f1b";
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

}  // namespace
}  // namespace sluice::partition
