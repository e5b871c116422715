// The step simulation (pipeline/ScheduleSimulation.h) against the textbook
// bubbles, with equal stages and free messages: the bubble (step time minus
// the busiest rank's busy time, m (F + B + W) per stage it hosts) is
//   1F1B:               (p - 1)(F + B + W)
//   ZB-H1 (unit order): (p - 1)(F + B - W)   (W <= F)
//   interleaved 1F1B:   (p - 1)(F + B + W) / v, v stages per rank, each a
//                       v-th of the rank's slice
// for p in {4, 8, 16, 32} and m in {p, 2p, 8p}; and what the simulation
// records: the critical path, receives that waited, peaks and trace names.
#include <gtest/gtest.h>

#include <cmath>

#include "pipeline/Schedule.h"
#include "pipeline/ScheduleSimulation.h"

namespace sluice::pipeline {
namespace {

struct Piece {
  double f, b, w;
};
// The equal times of the papers' figures, and times that are not multiples
// of each other (with W <= F, where ZB-H1's bubble is the textbook's).
const Piece kPieces[] = {{1, 1, 1}, {1.0, 1.5, 0.75}, {0.5, 0.7, 0.3}};

std::vector<int> pipelineDepths() { return {4, 8, 16, 32}; }

// Bubble time of a simulation: cost minus the most loaded rank's busy time.
double bubbleTime(const StepSimulation& sim) { return bubbleRate(sim) * sim.stepTime; }

TEST(ScheduleSimulation, OneFOneBHasTheTextbookBubble) {
  for (const auto& x : kPieces) {
    for (int p : pipelineDepths()) {
      for (int m : {p, 2 * p, 8 * p}) {
        const auto sim = simulateStepWithRefill(make1F1B(p, m), std::vector<StageTimes>(p, {x.f, x.b + x.w, 0, 0}),
                                                0, {});
        const double want = (p - 1) * (x.f + x.b + x.w);
        EXPECT_NEAR(bubbleTime(sim), want, 1e-9 * want) << "p=" << p << " m=" << m;
        EXPECT_NEAR(bubbleRate(sim), want / (want + m * (x.f + x.b + x.w)), 1e-12);
      }
    }
  }
}

TEST(ScheduleSimulation, ZeroBubbleH1InUnitOrderHasTheTextbookBubble) {
  for (const auto& x : kPieces) {
    for (int p : pipelineDepths()) {
      for (int m : {p, 2 * p, 8 * p}) {
        const auto sim =
            simulateStepWithRefill(makeZeroBubbleH1(p, m), std::vector<StageTimes>(p, {x.f, 0, x.b, x.w}), 0, {});
        const double want = (p - 1) * (x.f + x.b - x.w);
        EXPECT_NEAR(bubbleTime(sim), want, 1e-9 * want) << "p=" << p << " m=" << m << " F,B,W " << x.f << ","
                                                        << x.b << "," << x.w;
      }
    }
  }
}

TEST(ScheduleSimulation, InterleavedHasTheTextbookBubbleOverV) {
  for (const auto& x : kPieces) {
    for (int v : {2, 4}) {
      for (int p : pipelineDepths()) {
        for (int m : {p, 2 * p, 8 * p}) {
          const auto s = makeInterleaved1F1B(p, v, m);
          const auto sim =
              simulateStepWithRefill(s, std::vector<StageTimes>(p * v, {x.f / v, (x.b + x.w) / v, 0, 0}), 0, {});
          const double want = (p - 1) * (x.f + x.b + x.w) / v;
          EXPECT_NEAR(bubbleTime(sim), want, 1e-9 * want) << "p=" << p << " v=" << v << " m=" << m;
          EXPECT_NEAR(sim.busy[0], m * (x.f + x.b + x.w), 1e-9 * m);
        }
      }
    }
  }
}

// 1F1B on 2 stages, 1 micro-batch, F = 1, B = 2, messages 0.5: F0 on rank
// 0 [0, 1], the activation arrives at 1.5, F0 and B0 on rank 1 [1.5, 4.5],
// the gradient arrives at 5, B0 on rank 0 [5, 7]. The path is exactly that
// chain, with both waits on it.
TEST(ScheduleSimulation, TheCriticalPathFollowsWhatEachActionWaitedFor) {
  const auto sim = simulateStepWithRefill(make1F1B(2, 1), std::vector<StageTimes>(2, {1, 2, 0, 0}), 0.5, {});
  EXPECT_DOUBLE_EQ(sim.stepTime, 7);
  const auto path = criticalPath(sim);
  std::vector<std::string> names;
  for (const auto& [rank, x] : path) names.push_back(std::to_string(rank) + ":" + toString(x.action));
  EXPECT_EQ(names, (std::vector<std::string>{"0:F0", "1:recv_act0", "1:F0", "1:B0", "0:recv_grad0", "0:B0"}));
  EXPECT_DOUBLE_EQ(path[1].second.start, 0);  // rank 1 waited from the step's start...
  EXPECT_DOUBLE_EQ(path[1].second.end, 1.5);  // ...until the activation arrived
  EXPECT_DOUBLE_EQ(path.back().second.end, sim.stepTime);
  EXPECT_DOUBLE_EQ(sim.busy[0], 3);
  EXPECT_DOUBLE_EQ(bubbleRate(sim), 4.0 / 7);
}

// Note [ranks sharing cores]: 1F1B on 2 ranks and 2 micro-batches, F = 1 and
// B = 2 per stage, free messages. With a core each the step is 9; on one
// core, ranks computing together each run at half speed:
//   rank 0: F0 [0, 1], F1 [1, 3] (beside rank 1's F0), B0 [5, 9], B1 [10, 12]
//   rank 1: F0 [1, 3], B0 [3, 5] (alone), F1 [5, 7], B1 [7, 10]
// so the step is 12, the 12 units of work back to back on the one core.
TEST(ScheduleSimulation, RanksSharingOneCoreTakeTurnsAtHalfSpeed) {
  const std::vector<StageTimes> times(2, {1, 2, 0, 0});
  EXPECT_DOUBLE_EQ(simulateStepWithRefill(make1F1B(2, 2), times, 0, {}).stepTime, 9);
  const auto sim = simulateStepOnCores(make1F1B(2, 2), times, 0, {}, 1);
  EXPECT_NEAR(sim.stepTime, 12, 1e-12);
  std::vector<std::string> got;
  for (const auto& x : sim.ranks[1]) {
    if (isCompute(x.action)) got.push_back(toString(x.action) + " " + std::to_string(x.start) + "-" + std::to_string(x.end));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"F0 1.000000-3.000000", "B0 3.000000-5.000000", "F1 5.000000-7.000000",
                                           "B1 7.000000-10.000000"}));
  EXPECT_NEAR(sim.busy[0], 1 + 2 + 4 + 2, 1e-12);  // wall time computing, slowed where shared
}

// With a core for every rank, free messages and waits that see a message at
// once, the event loop replays the plain simulation: the same intervals,
// waits and refill, for every kind of schedule.
TEST(ScheduleSimulation, WithACoreForEveryRankSharingChangesNothing) {
  RefillCosts refill;
  refill.waitSeconds = 0.5;
  for (const auto& [name, chunks] : std::vector<std::pair<std::string, int>>{
           {"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1}, {"interleaved", 2}, {"interleaved-zb", 2}, {"zbv", 2}}) {
    const auto schedule = makeSchedule(name, 4, 8, chunks);
    std::vector<StageTimes> times;
    for (int k = 0; k < schedule.stages; ++k) times.push_back({1.0 + 0.1 * k, 2.1 - 0.2 * k, 1.2 - 0.1 * k, 0.9});
    refill.share.assign(schedule.stages, 0.05);
    const auto own = simulateStepWithRefill(schedule, times, 0, refill);
    for (double cores : {4.0, 64.0}) {
      const auto shared = simulateStepOnCores(schedule, times, 0, refill, cores);
      EXPECT_NEAR(shared.stepTime, own.stepTime, 1e-9) << name;
      ASSERT_EQ(shared.ranks.size(), own.ranks.size());
      for (size_t r = 0; r < own.ranks.size(); ++r) {
        ASSERT_EQ(shared.ranks[r].size(), own.ranks[r].size()) << name << " rank " << r;
        for (size_t i = 0; i < own.ranks[r].size(); ++i) {
          EXPECT_EQ(toString(shared.ranks[r][i].action), toString(own.ranks[r][i].action)) << name;
          EXPECT_NEAR(shared.ranks[r][i].end, own.ranks[r][i].end, 1e-9) << name;
          EXPECT_EQ(shared.ranks[r][i].after, own.ranks[r][i].after) << name;
        }
      }
    }
    // Messages the receivers copy, fewer cores, waits that poll and sleep:
    // never faster, and never faster than the work spread over the cores.
    const auto plain = simulateStepWithRefill(schedule, times, 0.3, {});
    double work = 0;
    for (double b : plain.busy) work += b;
    const auto copied = simulateStepOnCores(schedule, times, 0.3, {}, 4);
    EXPECT_GE(copied.stepTime, plain.stepTime - 1e-9) << name;
    const auto two = simulateStepOnCores(schedule, times, 0.3, {}, 2);
    EXPECT_GE(two.stepTime, copied.stepTime - 1e-9) << name;
    EXPECT_GE(two.stepTime, work / 2 - 1e-9) << name;
    const auto napping = simulateStepOnCores(schedule, times, 0.3, {}, 2, waitPolicy(true));
    EXPECT_GE(napping.stepTime, two.stepTime - 1e-9) << name;
  }
}

// Note [ranks sharing cores]: a rank takes its expected time over where the
// scheduler puts it. 3 ranks on 2 cores: 2 share a core and 1 has one, so a
// rank is slowed 2x with odds 2/3 and not at all with odds 1/3: 5/3 of its
// time, a rate of 3/5. Evenly divided (4 on 2) or fractional cores: the
// even share. Played out on three ranks with no messages between them, F =
// B = 0.6, except rank 2's 0.3: all three run at 0.6, so rank 2 ends F at
// 0.5 and B at 1.0, when ranks 0 and 1 end F (0.6 of work at 0.6); then
// two ranks on two cores run at full speed, B [1.0, 1.6].
TEST(ScheduleSimulation, ARankTakesItsExpectedTimeOverWhereItIsPlaced) {
  EXPECT_DOUBLE_EQ(sharedRate(1, 2), 1);
  EXPECT_DOUBLE_EQ(sharedRate(2, 2), 1);
  EXPECT_DOUBLE_EQ(sharedRate(3, 2), 0.6);
  EXPECT_DOUBLE_EQ(sharedRate(4, 2), 0.5);
  EXPECT_DOUBLE_EQ(sharedRate(5, 2), 1 / 2.6);  // (1 core x 3 ranks x 3 + 1 x 2 x 2) / 5
  EXPECT_DOUBLE_EQ(sharedRate(5, 3), 1 / 1.8);
  EXPECT_DOUBLE_EQ(sharedRate(3, 1), 1.0 / 3);
  EXPECT_DOUBLE_EQ(sharedRate(3, 1.5), 0.5);
  Schedule s;
  s.stages = 3;
  for (int k = 0; k < 3; ++k) {
    s.actions.push_back({{ActionKind::Forward, 0, k}, {ActionKind::Backward, 0, k}});
  }
  std::vector<StageTimes> times(3, {0.6, 0.6, 0, 0});
  EXPECT_NEAR(simulateStepOnCores(s, times, 0, {}, 2).stepTime, 2, 1e-12);
  times[2] = {0.3, 0.3, 0, 0};
  const auto sim = simulateStepOnCores(s, times, 0, {}, 2);
  EXPECT_NEAR(sim.stepTime, 1.6, 1e-12);
  ASSERT_EQ(sim.ranks[2].size(), 2u);
  EXPECT_NEAR(sim.ranks[2][0].end, 0.5, 1e-12);
  EXPECT_NEAR(sim.ranks[2][1].end, 1.0, 1e-12);
  EXPECT_NEAR(sim.ranks[0][0].end, 1.0, 1e-12);
  EXPECT_NEAR(sim.ranks[0][1].end, 1.6, 1e-12);
}

// Note [ranks sharing cores]: a message is its receiver's work. GPipe on 2
// ranks with a core each, F = 1, B = 1, messages 0.5. Rank 1 sees activation
// 0 sent at 1 and copies it [1, 1.5]; activation 1, sent at 2, is there when
// rank 1 ends F0 at 2.5, and still takes its copy [2.5, 3]. Over the wire
// without copies (cores <= 0) it arrived at 2.5 and F1 ran [2.5, 3.5].
TEST(ScheduleSimulation, TheReceiverCopiesItsMessages) {
  const std::vector<StageTimes> times(2, {1, 1, 0, 0});
  const auto computes = [](const StepSimulation& sim, int rank) {
    std::vector<std::string> got;
    for (const auto& x : sim.ranks[rank]) {
      if (x.action.kind == ActionKind::Forward) got.push_back(toString(x.action) + " " + std::to_string(x.start) + "-" + std::to_string(x.end));
    }
    return got;
  };
  const auto shared = simulateStepOnCores(makeGPipe(2, 2), times, 0.5, {}, 2);
  EXPECT_EQ(computes(shared, 1), (std::vector<std::string>{"F0 1.500000-2.500000", "F1 3.000000-4.000000"}));
  const auto wire = simulateStepOnCores(makeGPipe(2, 2), times, 0.5, {}, 0);
  EXPECT_EQ(computes(wire, 1), (std::vector<std::string>{"F0 1.500000-2.500000", "F1 2.500000-3.500000"}));
}

// Note [ranks sharing cores]: waits as Work::wait waits. GPipe on 2 ranks and
// one micro-batch sharing one core, F = 1.5, B = 1, free messages; a wait
// polls 0.5, then sleeps 0.25, 0.5, then 1 between polls.
//   rank 1 polls [0, 0.5] beside rank 0's F0, which runs at half speed, then
//   alone: F0 ends at 1.75. Rank 1 polls at 0.75, 1.25 and 2.25 and sees the
//   activation at 2.25: F0 [2.25, 3.75], B0 [3.75, 4.75].
//   rank 0 polls from 1.75 (alone) and then at 2.5, 3 and 5: B0 [5, 6].
// Waits that see a message at once: 5, the 5 units back to back.
TEST(ScheduleSimulation, WaitsPollThenSleep) {
  const std::vector<StageTimes> times(2, {1.5, 1, 0, 0});
  const WaitPolicy waits{0.5, 0.25, 1};
  const auto sim = simulateStepOnCores(makeGPipe(2, 1), times, 0, {}, 1, waits);
  EXPECT_NEAR(sim.stepTime, 6, 1e-12);
  std::vector<std::string> got;
  for (int r : {0, 1}) {
    for (const auto& x : sim.ranks[r]) {
      if (isCompute(x.action)) got.push_back(toString(x.action) + " " + std::to_string(x.start) + "-" + std::to_string(x.end));
    }
  }
  EXPECT_EQ(got, (std::vector<std::string>{"F0 0.000000-1.750000", "B0 5.000000-6.000000", "F0 2.250000-3.750000",
                                           "B0 3.750000-4.750000"}));
  EXPECT_NEAR(simulateStepOnCores(makeGPipe(2, 1), times, 0, {}, 1).stepTime, 5, 1e-12);
}

// Activation memory in a rank's micro-batches: 1F1B holds p - r on rank r,
// GPipe all m, interleaved with v chunks (p - r) + ... per chunk, over v.
// Uneven stages: the bubble is measured against the busiest rank (a light
// rank that ends last does not make the step all bubble).
TEST(ScheduleSimulation, TheBubbleIsAgainstTheBusiestRank) {
  const auto sim = simulateStepWithRefill(make1F1B(2, 4), {{0.1, 0.1, 0, 0}, {1, 2, 0, 0}}, 0, {});
  EXPECT_DOUBLE_EQ(sim.stepTime, 0.1 + 4 * 3 + 0.1);
  EXPECT_NEAR(bubbleRate(sim), 0.2 / 12.2, 1e-12);
}

TEST(ScheduleSimulation, PeakActivationsPerRank) {
  EXPECT_EQ(peakActivationMicroBatches(make1F1B(4, 8)), (std::vector<double>{4, 3, 2, 1}));
  EXPECT_EQ(peakActivationMicroBatches(makeGPipe(3, 5)), (std::vector<double>{5, 5, 5}));
  const auto interleaved = peakActivationMicroBatches(makeInterleaved1F1B(4, 2, 8));
  ASSERT_EQ(interleaved.size(), 4u);
  EXPECT_GT(interleaved[0], interleaved[3]);
  EXPECT_EQ(std::fmod(interleaved[0] * 2, 1.0), 0.0);  // stage-micro-batches over 2 chunks
}

TEST(ScheduleSimulation, TraceNamesAreARealRunsNames) {
  EXPECT_EQ(traceNameOf({ActionKind::Forward, 3, 0}, false), (std::pair<std::string, std::string>{"F3", "compute"}));
  EXPECT_EQ(traceNameOf({ActionKind::BackwardInput, 3, 2}, true).first, "Bi3 s2");
  EXPECT_EQ(traceNameOf({ActionKind::RecvGrad, 1, 0}, false),
            (std::pair<std::string, std::string>{"recv gradient 1", "recv"}));
}

}  // namespace
}  // namespace sluice::pipeline
