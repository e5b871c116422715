// Note [refill after a wait] (partition/Refill.h): the pieces measureRefill
// times, the shares a stage gets from them, and what a plan charges: only
// actions that follow a wait, by hand-derived amounts on schedules whose waits
// are known (a light first stage before a slow last one).
#include <gtest/gtest.h>

#include <cmath>

#include "core/Capture.h"
#include "core/Communicator.h"
#include "partition/Plan.h"
#include "partition/Refill.h"
#include "tests/TestUtil.h"

namespace sluice::partition {
namespace {

TEST(Refill, CutsSplitTheProfiledTimeIntoNearEqualPiecesAtValidCuts) {
  torch::manual_seed(0);
  auto gpt = models::Gpt(test::tinyGpt(4));
  auto graph = test::captureGpt(gpt, 2, 8);
  const auto profile = test::randomTimesProfile(graph);
  const int n = graph.numNodes();
  std::vector<double> prefix(n + 1, 0);
  double largest = 0;
  for (int j = 0; j < n; ++j) {
    const double t = profile.nodes[j].forwardSeconds + profile.nodes[j].backwardSeconds;
    prefix[j + 1] = prefix[j] + t;
    largest = std::max(largest, t);
  }
  // The widest gap between consecutive valid cuts bounds how far a cut may sit from its share.
  const auto valid = graph.validCuts();
  double gap = 0;
  for (size_t i = 1; i < valid.size(); ++i) gap = std::max(gap, prefix[valid[i]] - prefix[valid[i - 1]]);
  for (int pieces : {1, 2, 4, 6}) {
    const auto cuts = refillCuts(graph, profile, pieces);
    ASSERT_EQ(static_cast<int>(cuts.size()), pieces - 1);
    for (size_t k = 0; k < cuts.size(); ++k) {
      EXPECT_TRUE(graph.isValidCut(cuts[k])) << cuts[k];
      if (k > 0) {
        EXPECT_GT(cuts[k], cuts[k - 1]);
      }
      EXPECT_LE(std::abs(prefix[cuts[k]] - prefix[n] * (k + 1) / pieces), gap) << "cut " << k << " of " << pieces;
    }
  }
}

TEST(Refill, AStagesShareIsItsNodesPiecesWeightedByTheirTimes) {
  Profile profile;
  for (int j = 0; j < 4; ++j) {
    NodeProfile node;
    node.index = j;
    node.forwardSeconds = 1e-3 * (j + 1);  // 1, 2, 3, 4 ms
    node.backwardSeconds = 2e-3;
    profile.nodes.push_back(node);
  }
  EXPECT_EQ(refillShare(profile, 0, 4), 0.0);  // not measured
  profile.refill.waitSeconds = 0.02;
  profile.refill.pieces = {{0, 2, 0.10}, {2, 4, 0.20}};
  // Nodes 1 (piece 0, 4 ms), 2 and 3 (piece 1, 5 and 6 ms).
  EXPECT_NEAR(refillShare(profile, 1, 4), (0.10 * 4 + 0.20 * 5 + 0.20 * 6) / 15.0, 1e-12);
  EXPECT_NEAR(refillShare(profile, 0, 2), 0.10, 1e-12);
}

TEST(Refill, MeasuresEveryPieceOnFreshLeaves) {
  torch::manual_seed(0);
  auto gpt = models::Gpt(test::tinyGpt(2));
  auto graph = test::captureGpt(gpt, 2, 8);
  const auto profile = test::randomTimesProfile(graph);
  auto inputs = graphInputs(graph, *gpt, {torch::randint(0, 64, {2, 8}, torch::kLong)});
  RefillOptions options;
  options.pieces = 3;
  options.rounds = 3;
  options.waitSeconds = 0.001;
  const auto refill = measureRefill(graph, inputs, profile, Communicator::self(), options);
  EXPECT_EQ(refill.waitSeconds, 0.001);
  EXPECT_EQ(refill.rounds, 3);
  ASSERT_EQ(refill.pieces.size(), 3u);
  int next = 0;
  for (auto& piece : refill.pieces) {
    EXPECT_EQ(piece.firstNode, next);
    EXPECT_GT(piece.endNode, piece.firstNode);
    next = piece.endNode;
    EXPECT_TRUE(std::isfinite(piece.share) && piece.share >= 0);
  }
  EXPECT_EQ(next, graph.numNodes());
  for (auto& p : gpt->parameters()) EXPECT_FALSE(p.grad().defined()) << "the model's own .grad was written";
}

// A 2-stage split whose first stage is light: every backward of stage 0 waits
// for the slow last stage, nothing else on stage 0 waits, and only the last
// stage's first forward waits (for the first activation). With waits counted
// in full (a tiny waitSeconds) and one share s for every node, GPipe and 1F1B
// charge exactly:
//   stage 0: s x its backward, per micro-batch;
//   stage 1: s x its forward, once per step;
// and the step grows by both (the last stage's first forward delays all it
// does; stage 0's last backward ends the step).
TEST(Refill, PlansChargeOnlyTheActionsThatFollowAWait) {
  torch::manual_seed(1);
  auto gpt = models::Gpt(test::tinyGpt(4));
  auto graph = test::captureGpt(gpt, 2, 8);
  auto plain = test::randomTimesProfile(graph);
  const auto valid = graph.validCuts();
  const int cut = valid.at(valid.size() / 5);
  auto charged = plain;
  const double share = 0.3;
  charged.refill.waitSeconds = 1e-12;
  charged.refill.rounds = 1;
  charged.refill.pieces = {{0, graph.numNodes(), share}};
  for (const char* schedule : {"gpipe", "1f1b"}) {
    PlanSettings st;
    st.stages = 2;
    st.microBatches = 8;
    st.schedule = pipeline::ScheduleChoice::of(pipeline::scheduleKind(schedule));
    const auto without = planForCuts(graph, plain, st, {cut});
    const auto with = Plan::fromBytes(planForCuts(graph, charged, st, {cut}).toBytes(), "test");
    ASSERT_EQ(with.stages.size(), 2u);
    const auto& s0 = without.stages[0];
    const auto& s1 = without.stages[1];
    ASSERT_GT(s1.time, 3 * s0.time) << "the test needs a light first stage";
    ASSERT_EQ(s0.comm, 0) << "the random profile has no p2p costs";
    EXPECT_EQ(without.stages[0].refill, 0);
    EXPECT_EQ(without.stages[1].refill, 0);
    EXPECT_EQ(without.refillWaitSeconds, 0);
    EXPECT_FALSE(without.refillCosts().charged());
    // The last stage's simulated forward carries the loss in the profile's forward : backward ratio.
    const double f1 = (s1.forward + s1.backward + s1.loss) * s1.forward / (s1.forward + s1.backward);
    EXPECT_NEAR(with.stages[0].refill, share * s0.backward, 1e-12) << schedule;
    EXPECT_NEAR(with.stages[1].refill, share * f1 / st.microBatches, 1e-12) << schedule;
    EXPECT_NEAR(with.stepTime - without.stepTime, share * (f1 + s0.backward), 1e-12) << schedule;
    for (int k = 0; k < 2; ++k) {
      EXPECT_NEAR(with.stages[k].time, without.stages[k].time + with.stages[k].refill, 1e-12);
      EXPECT_DOUBLE_EQ(with.stages[k].refillShare, share);
    }
    EXPECT_EQ(with.refillWaitSeconds, 1e-12);
  }
}

}  // namespace
}  // namespace sluice::partition
