// The `layers` partition method: on a captured GPT with random per-node
// times, its cuts fall between layers (embedding, each block, head) and give
// the smallest slowest-stage time of every way to cut between layers (brute
// force written here, not by the code under test). And the profile method's
// preference for layer boundaries (PlanSettings::minOpLevelGain): it cuts
// between ops only when that is predicted to gain at least the threshold over
// the best split on layer boundaries (brute force again).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "core/Error.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
#include "tests/TestUtil.h"

namespace sluice::partition {
namespace {

// The smallest cost(cuts) over every choice of `count` of `candidates`, in order (brute force).
double smallestOverChoices(const std::vector<int>& candidates, int count,
                           const std::function<double(const std::vector<int>&)>& cost) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> choice;
  std::function<void(size_t)> pick = [&](size_t at) {
    if (static_cast<int>(choice.size()) == count) {
      best = std::min(best, cost(choice));
      return;
    }
    for (size_t i = at; i < candidates.size(); ++i) {
      choice.push_back(candidates[i]);
      pick(i + 1);
      choice.pop_back();
    }
  };
  pick(0);
  return best;
}

TEST(LayerCuts, SlowestStageIsTheSmallestOfAllLayerSplits) {
  torch::manual_seed(0);
  auto gpt = models::Gpt(test::tinyGpt(4));
  auto graph = test::captureGpt(gpt, 2, 8);
  const int n = graph.numNodes();
  // Layer starts: block b's first node is the first node reading "h.<b>."; the head starts after block 3's last.
  const auto block = blockOfNodes(graph);
  std::set<int> starts;
  int lastBlockNode = 0;
  for (int j = 0; j < n; ++j) {
    if (block[j] >= 0 && (j == 0 || block[j - 1] != block[j]) &&
        std::none_of(block.begin(), block.begin() + j, [&](int b) { return b == block[j]; })) {
      starts.insert(j);
    }
    if (block[j] == 3) lastBlockNode = j;
  }
  starts.insert(lastBlockNode + 1);
  ASSERT_EQ(starts.size(), 5u);  // blocks 0..3 and the head
  const auto valid = graph.validCuts();
  for (int s : starts) ASSERT_NE(std::find(valid.begin(), valid.end(), s), valid.end()) << "layer start " << s;
  std::vector<int> bounds{0};
  bounds.insert(bounds.end(), starts.begin(), starts.end());
  bounds.push_back(n);

  for (int trial = 0; trial < 5; ++trial) {
    const auto profile = test::randomTimesProfile(graph);
    auto timeOf = [&](int from, int to) {
      double sum = to == n ? profile.lossForwardSeconds : 0;
      for (int j = from; j < to; ++j) sum += profile.nodes[j].forwardSeconds + profile.nodes[j].backwardSeconds;
      return sum;
    };
    auto slowest = [&](const std::vector<int>& cuts) {
      double worst = 0;
      int from = 0;
      for (size_t i = 0; i <= cuts.size(); ++i) {
        const int to = i < cuts.size() ? cuts[i] : n;
        worst = std::max(worst, timeOf(from, to));
        from = to;
      }
      return worst;
    };
    for (int stages : {2, 3, 4}) {
      const auto cuts = layerCuts(graph, profile, stages);
      ASSERT_EQ(static_cast<int>(cuts.size()), stages - 1);
      for (int c : cuts) EXPECT_TRUE(starts.count(c)) << "cut " << c << " is not between layers";
      // Brute force over every choice of stages - 1 inner boundaries.
      const std::vector<int> inner(bounds.begin() + 1, bounds.end() - 1);
      const double best = smallestOverChoices(inner, stages - 1, slowest);
      EXPECT_DOUBLE_EQ(slowest(cuts), best) << "trial " << trial << ", " << stages << " stages";
    }
  }
  // More stages than layers: refused, naming the method.
  Profile profile;
  profile.nodes.resize(n);
  EXPECT_THROW(
      {
        try {
          layerCuts(graph, profile, 7);
        } catch (const PlanError& e) {
          EXPECT_NE(std::string(e.what()).find("method layers"), std::string::npos) << e.what();
          throw;
        }
      },
      PlanError);
}

// Layer starts as the test reads them: the first node reading each "h.<b>."
// and the node after the last block's last node.
std::set<int> layerStarts(const OpGraph& graph, int blocks) {
  const auto block = blockOfNodes(graph);
  std::set<int> starts;
  int lastBlockNode = 0;
  for (int j = 0; j < graph.numNodes(); ++j) {
    if (block[j] >= 0 && std::none_of(block.begin(), block.begin() + j, [&](int b) { return b == block[j]; })) {
      starts.insert(j);
    }
    if (block[j] == blocks - 1) lastBlockNode = j;
  }
  starts.insert(lastBlockNode + 1);
  return starts;
}

TEST(LayerBoundariesFirst, OpLevelCutsOnlyWhenTheyGainTheThreshold) {
  torch::manual_seed(1);
  auto gpt = models::Gpt(test::tinyGpt(4));
  auto graph = test::captureGpt(gpt, 2, 8);
  const auto starts = layerStarts(graph, 4);
  ASSERT_EQ(starts.size(), 5u);
  const std::vector<int> inner(starts.begin(), starts.end());
  int alignedChosen = 0, opLevelChosen = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const auto profile = test::randomTimesProfile(graph);
    for (int stages : {2, 3}) {
      PlanSettings st;
      st.stages = stages;
      st.microBatches = 4;
      st.minOpLevelGain = 0;
      const auto opLevel = makePlan(graph, profile, st);
      EXPECT_TRUE(opLevel.opLevelCuts.empty());
      // The best split on layer boundaries, by brute force over planForCuts.
      const double bestAligned = smallestOverChoices(
          inner, stages - 1, [&](const std::vector<int>& cuts) { return planForCuts(graph, profile, st, cuts).stepTime; });
      const auto opCuts = opLevel.cuts();
      const bool opOnBoundaries =
          std::all_of(opCuts.begin(), opCuts.end(), [&](int c) { return starts.count(c) > 0; });
      for (double gain : {0.03, 0.15}) {
        st.minOpLevelGain = gain;
        const auto plan = makePlan(graph, profile, st);
        const auto cuts = plan.cuts();
        const std::string where = "trial " + std::to_string(trial) + ", " + std::to_string(stages) +
                                  " stages, gain " + std::to_string(gain);
        if (opOnBoundaries || opLevel.stepTime < bestAligned * (1 - gain)) {
          // Op-level cuts that pay (or already lie between layers): kept as they are.
          EXPECT_EQ(cuts, opCuts) << where;
          EXPECT_TRUE(plan.opLevelCuts.empty()) << where;
          if (!opOnBoundaries) ++opLevelChosen;
        } else {
          // Too small a gain: the best split on layer boundaries, with the passed-over cuts recorded.
          for (int c : cuts) EXPECT_TRUE(starts.count(c)) << where << ": cut " << c << " is not between layers";
          EXPECT_NEAR(plan.stepTime, bestAligned, 1e-12) << where;
          EXPECT_EQ(plan.opLevelCuts, opCuts) << where;
          EXPECT_NEAR(plan.opLevelStepTime, opLevel.stepTime, 1e-12) << where;
          EXPECT_EQ(plan.minOpLevelGain, gain) << where;
          ++alignedChosen;
          // Recorded in the file and shown by `sluice plan show`.
          const auto back = Plan::fromBytes(plan.toBytes(), "test");
          EXPECT_EQ(back.opLevelCuts, opCuts);
          EXPECT_DOUBLE_EQ(back.opLevelStepTime, plan.opLevelStepTime);
          EXPECT_NE(back.table().find("cuts on layer boundaries"), std::string::npos) << back.table();
        }
      }
    }
  }
  // Both outcomes occur on these random profiles, so neither branch is vacuous.
  EXPECT_GT(alignedChosen, 0);
  EXPECT_GT(opLevelChosen, 0);
}

// One block and two stages: layer cuts can only put the whole block on one
// side; the op-level split of the block is far above the threshold and stays.
TEST(LayerBoundariesFirst, OneBlockIsSplitBetweenOps) {
  torch::manual_seed(2);
  auto gpt = models::Gpt(test::tinyGpt(1));
  auto graph = test::captureGpt(gpt, 2, 8);
  auto profile = test::randomTimesProfile(graph);
  profile.lossForwardSeconds = 0;
  const auto starts = layerStarts(graph, 1);
  PlanSettings st;
  st.stages = 2;
  st.microBatches = 4;
  const auto plan = makePlan(graph, profile, st);  // the default threshold
  ASSERT_EQ(plan.cuts().size(), 1u);
  EXPECT_FALSE(starts.count(plan.cuts()[0])) << "cut " << plan.cuts()[0] << " lies between layers";
  EXPECT_TRUE(plan.opLevelCuts.empty());
  st.method = PartitionMethod::Layers;
  EXPECT_LT(plan.stepTime, makePlan(graph, profile, st).stepTime * (1 - PlanSettings{}.minOpLevelGain));
}

}  // namespace
}  // namespace sluice::partition
