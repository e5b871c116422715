// The `layers` partition method: on a captured GPT with random per-node
// times, its cuts fall between layers (embedding, each block, head) and give
// the smallest slowest-stage time of every way to cut between layers (brute
// force written here, not by the code under test).
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
      double best = std::numeric_limits<double>::infinity();
      std::vector<int> inner(bounds.begin() + 1, bounds.end() - 1), choice;
      std::function<void(size_t)> pick = [&](size_t at) {
        if (static_cast<int>(choice.size()) == stages - 1) {
          best = std::min(best, slowest(choice));
          return;
        }
        for (size_t i = at; i < inner.size(); ++i) {
          choice.push_back(inner[i]);
          pick(i + 1);
          choice.pop_back();
        }
      };
      pick(0);
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

}  // namespace
}  // namespace sluice::partition
