// A toy schedule added the way docs/architecture.md's recipe "Add a
// schedule" says: a builder and one row in the schedule table. Here the row
// is added from this file (test-only, so the library's table stays as it
// is); a library schedule puts its row in pipeline/ScheduleKinds.cpp.
// Nothing else names it: the table-driven tests pick it up by themselves,
//   - Schedule.EveryKindInTheTablePassesTheChecker (ScheduleTest.cpp),
//   - Equivalence.DropoutDrawsTheSameOnEveryLayout (EquivalenceTest.cpp:
//     bitwise the losses of 1 stage, dropout on, 2 and 3 ranks),
// and the test below checks that it is there and is a schedule of its own.
//
// "1f1b-deep": 1F1B with one more warm-up forward on every stage (one more
// micro-batch in flight, up to all of them). The backwards keep 1F1B's
// order, so gradients add up in the same order and the losses stay bitwise
// those of 1 stage (a schedule that reorders the backwards changes that sum
// and is equal only within rounding).
#include <gtest/gtest.h>

#include <algorithm>

#include "pipeline/ScheduleKinds.h"

namespace sluice::pipeline {
namespace {

Schedule makeDeep1F1B(int stages, int microBatches) {
  Schedule s{"", stages, microBatches, std::vector<std::vector<Action>>(stages)};
  for (int st = 0; st < stages; ++st) {
    auto& out = s.actions[st];
    const int warmup = std::min(stages - st, microBatches);  // 1F1B's + 1
    int nextF = 0, nextB = 0;
    for (; nextF < warmup; ++nextF) appendForward(out, st, stages, nextF);
    while (nextF < microBatches) {  // then one forward, one backward, as 1F1B
      appendForward(out, st, stages, nextF++);
      appendBackward(out, st, stages, nextB++);
    }
    while (nextB < microBatches) appendBackward(out, st, stages, nextB++);
  }
  return s;
}

const bool kRegistered = addScheduleKind(
    {"1f1b-deep", "test only: 1F1B with one more micro-batch in flight", /*interleaves=*/false,
     /*fitsStageTimes=*/false, /*holdsEveryMicroBatch=*/false, /*autoOrder=*/-1,
     [](int p, int, int m, const ScheduleCosts*) { return makeDeep1F1B(p, m); }});

TEST(ToySchedule, IsInTheTableAndIsNot1F1B) {
  ASSERT_TRUE(kRegistered);
  const auto& kind = scheduleKind("1f1b-deep");
  const auto toy = makeSchedule("1f1b-deep", 3, 6);
  EXPECT_EQ(toy.name, "1f1b-deep");
  EXPECT_FALSE(toy.actions == makeSchedule("1f1b", 3, 6).actions) << "the toy must order its actions differently";
  EXPECT_NO_THROW(checkSchedule(kind.build(3, 1, 6, nullptr)));
  EXPECT_EQ(peakInFlight(toy), (std::vector<int>{4, 3, 2}));  // 1F1B's 3, 2, 1, each one more
}

}  // namespace
}  // namespace sluice::pipeline
