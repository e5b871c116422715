// Note [graph pools] (partition/Prediction.cpp): under pipeline.execution:
// graphs a stage's predicted peak counts one pool per micro-batch slot, kept
// all run long, and the schedule's micro-batches in flight set the slots
// (GPipe's last stage 4, 1F1B's 1, on the same cuts).
#include <gtest/gtest.h>

#include "partition/Plan.h"
#include "partition/Profile.h"
#include "pipeline/Schedule.h"
#include "pipeline/ScheduleKinds.h"
#include "tests/TestUtil.h"

namespace sluice::partition {
namespace {

TEST(GraphPools, AGraphedStageHoldsOnePoolPerSlotAllRunLong) {
  torch::manual_seed(0);
  auto gpt = models::Gpt(test::tinyGpt(4));
  const auto graph = test::captureGpt(gpt, 2, 8);
  const auto profile = test::randomTimesProfile(graph);
  std::vector<int> cuts;
  for (const char* name : {"1f1b", "gpipe"}) {
    PlanSettings st;
    st.stages = 2;
    st.microBatches = 4;
    st.schedule = pipeline::ScheduleChoice::of(pipeline::scheduleKind(name));
    const auto eager = cuts.empty() ? makePlan(graph, profile, st) : planForCuts(graph, profile, st, cuts);
    cuts = eager.cuts();
    st.graphs = true;
    const auto graphed = planForCuts(graph, profile, st, cuts);
    const auto problem = makeProblem(graph, profile, st);
    const auto slots = pipeline::peakInFlight(pipeline::makeSchedule(name, 2, 4));
    for (size_t k = 0; k < 2; ++k) {
      const auto& e = eager.stages[k];
      const bool first = k == 0, last = k == 1;
      const int64_t perSlot = e.heldBytes + e.transientBytes + e.paramBytes +
                              (last ? 0 : 2 * problem.cutBytes.at(static_cast<size_t>(e.endNode))) +
                              (first ? 0 : e.boundaryBytes);
      EXPECT_EQ(graphed.stages[k].peakBytes, e.staticBytes + slots[k] * perSlot) << name << ", stage " << k;
      EXPECT_GT(graphed.stages[k].peakBytes, e.peakBytes) << name << ": eager frees what a pool keeps";
      EXPECT_EQ(graphed.stages[k].heldBytes, e.heldBytes) << "the same stage, only its peak counts the pools";
    }
  }
  EXPECT_EQ(pipeline::peakInFlight(pipeline::makeSchedule("gpipe", 2, 4)), (std::vector<int>{4, 4}));
  EXPECT_EQ(pipeline::peakInFlight(pipeline::makeSchedule("1f1b", 2, 4)), (std::vector<int>{2, 1}));
}

}  // namespace
}  // namespace sluice::partition
