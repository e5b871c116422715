// The partitioner against exhaustive search on the same cost model, and on a
// 5,000-node chain. No timing is asserted (bench/partition.sh reports it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "core/Error.h"
#include "partition/Partitioner.h"

namespace sluice::partition {
namespace {

Problem randomProblem(std::mt19937& rng) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto real = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Problem p;
  const int n = uni(2, 12);
  p.stages = uni(2, std::min(4, n));
  p.microBatches = uni(1, 8);
  p.gpipe = uni(0, 1) == 1;
  p.staticPerParamByte = uni(0, 1) ? 4.0 : 2.5;
  p.lossSeconds = real(0, 2e-3);
  p.p2pBandwidth = uni(0, 3) == 0 ? 0 : real(1e8, 1e10);
  p.p2pLatency = real(0, 1e-4);
  p.swapSecondsPerByte = uni(0, 3) == 0 ? 0 : real(1e-10, 2e-8);
  for (int j = 0; j < n; ++j) {
    NodeCost c;
    c.forward = real(1e-5, 1e-3);
    c.backward = real(0, 2e-3);
    c.saved = uni(0, 2) == 0 ? 0 : uni(1, 200000);
    c.params = uni(0, 1) ? 0 : uni(1, 50000);
    c.recomputable = uni(0, 4) != 0;
    p.nodes.push_back(c);
  }
  p.cutBytes.assign(n + 1, 0);
  p.validCut.assign(n + 1, 1);
  for (int c = 1; c < n; ++c) {
    p.cutBytes[c] = uni(1, 100000);
    p.validCut[c] = uni(0, 5) != 0;
  }
  // Budgets around what an equal-node split needs with everything kept, so
  // that some instances fit easily, some must free tensors, some cannot fit.
  int64_t peak = 0;
  for (int k = 0; k < p.stages; ++k) {
    int64_t params = 0, saved = 0;
    for (int j = k * n / p.stages; j < (k + 1) * n / p.stages; ++j) params += p.nodes[j].params, saved += p.nodes[j].saved;
    peak = std::max<int64_t>(peak, static_cast<int64_t>(params * p.staticPerParamByte) + inFlight(p, k) * saved);
  }
  p.budgetBytes = uni(0, 7) == 0 ? 0 : static_cast<int64_t>(peak * real(0.15, 1.2)) + 1;
  return p;
}

// Every action for every node of every stage of every split, evaluated by the
// cost model; returns +inf when nothing fits. Freeing a node that saves
// nothing frees no memory and only adds time, so such nodes are kept.
double bruteForce(const Problem& p) {
  const int n = p.numNodes();
  std::map<std::tuple<int, int, int>, double> stageBest;
  auto best = [&](int k, int first, int end) {
    auto key = std::make_tuple(k, first, end);
    auto found = stageBest.find(key);
    if (found != stageBest.end()) return found->second;
    std::vector<int> nodes;
    for (int j = first; j < end; ++j) {
      if (p.nodes[j].saved > 0) nodes.push_back(j);
    }
    double bestTime = INFINITY;
    std::vector<std::pair<int, Action>> freed;
    std::function<void(size_t)> rec = [&](size_t x) {
      if (x == nodes.size()) {
        auto s = evaluateStage(p, k, first, end, freed);
        if (s.fits) bestTime = std::min(bestTime, s.time);
        return;
      }
      rec(x + 1);  // keep
      if (p.swapSecondsPerByte > 0) {
        freed.emplace_back(nodes[x], Action::Swap);
        rec(x + 1);
        freed.pop_back();
      }
      if (p.nodes[nodes[x]].recomputable) {
        freed.emplace_back(nodes[x], Action::Recompute);
        rec(x + 1);
        freed.pop_back();
      }
    };
    rec(0);
    return stageBest[key] = bestTime;
  };
  double bestStep = INFINITY;
  std::vector<int> cuts;
  std::function<void(int)> split = [&](int from) {
    if (static_cast<int>(cuts.size()) == p.stages - 1) {
      double sum = 0, worst = 0;
      for (int k = 0; k < p.stages; ++k) {
        const int first = k ? cuts[k - 1] : 0, end = k + 1 < p.stages ? cuts[k] : n;
        const double t = best(k, first, end);
        sum += t, worst = std::max(worst, t);
      }
      bestStep = std::min(bestStep, sum + (p.microBatches - 1) * worst);
      return;
    }
    for (int c = from; c < n; ++c) {
      if (!p.validCut[c]) continue;
      cuts.push_back(c);
      split(c + 1);
      cuts.pop_back();
    }
  };
  split(1);
  return bestStep;
}

TEST(Partitioner, MatchesBruteForceOnRandomChains) {
  std::mt19937 rng(20261121);
  int feasible = 0, infeasible = 0, freedSome = 0;
  for (int trial = 0; trial < 240; ++trial) {
    auto p = randomProblem(rng);
    const double expected = bruteForce(p);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(p.numNodes()) + " nodes, " +
                 std::to_string(p.stages) + " stages, budget " + std::to_string(p.budgetBytes));
    if (std::isinf(expected)) {
      EXPECT_THROW(partitionOptimal(p), PlanError);
      ++infeasible;
      continue;
    }
    auto got = partitionOptimal(p);
    EXPECT_NEAR(got.stepTime, expected, 1e-12 * std::max(1.0, expected));
    // The plan is what the cost model says it is, and fits.
    std::vector<StageCost> again;
    for (auto& s : got.stages) {
      again.push_back(evaluateStage(p, s.stage, s.first, s.end, s.freed));
      EXPECT_TRUE(again.back().fits);
      if (!s.freed.empty()) ++freedSome;
    }
    EXPECT_NEAR(stepTime(again, p.microBatches), got.stepTime, 1e-12);
    ++feasible;
  }
  // The instances cover every regime.
  EXPECT_GE(feasible, 100);
  EXPECT_GE(infeasible, 20);
  EXPECT_GE(freedSome, 30);
}

TEST(Partitioner, InfeasibleNamesTheSmallestBudgetThatFits) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    auto p = randomProblem(rng);
    if (p.budgetBytes == 0 || !std::isinf(bruteForce(p))) continue;
    const int64_t need = minimalBudget(p);
    if (need < 0) continue;  // e.g. fewer valid cuts than stages
    try {
      partitionOptimal(p);
      ADD_FAILURE() << "expected no plan for budget " << p.budgetBytes;
    } catch (const PlanError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(need) + " bytes"), std::string::npos) << e.what();
    }
    p.budgetBytes = need;
    EXPECT_FALSE(std::isinf(bruteForce(p))) << "the named budget " << need << " must fit";
  }
}

// A GPT-like chain: 5,000 nodes in repeating blocks, a binding budget.
Problem longChain() {
  std::mt19937 rng(3);
  Problem p;
  const int n = 5000;
  p.stages = 8;
  p.microBatches = 16;
  p.p2pBandwidth = 4e9;
  p.p2pLatency = 5e-6;
  p.swapSecondsPerByte = 2e-9;
  for (int j = 0; j < n; ++j) {
    NodeCost c;
    const int kind = j % 25;
    c.forward = (kind == 3 || kind == 11 ? 4e-4 : 2e-5) * std::uniform_real_distribution<double>(0.8, 1.2)(rng);
    c.backward = 2 * c.forward;
    c.saved = kind % 3 == 0 ? 0 : (kind == 7 ? 4 << 20 : 1 << 20);
    c.params = kind == 3 || kind == 11 ? 2 << 20 : 0;
    c.recomputable = kind != 5;
    p.nodes.push_back(c);
  }
  p.cutBytes.assign(n + 1, 1 << 20);
  p.validCut.assign(n + 1, 1);
  for (int c = 0; c <= n; ++c) p.validCut[c] = c % 5 != 2;
  p.budgetBytes = 0;
  return p;
}

TEST(Partitioner, FiveThousandNodesIntoEightStages) {
  auto p = longChain();
  auto unlimited = partitionOptimal(p);
  int64_t peak = 0;
  for (auto& s : unlimited.stages) peak = std::max(peak, s.peakBytes);
  p.budgetBytes = peak * 7 / 10;  // binding: stages must free tensors
  auto plan = partitionOptimal(p);
  ASSERT_EQ(plan.cuts.size(), 7u);
  bool freed = false;
  for (auto& s : plan.stages) {
    EXPECT_TRUE(s.fits);
    EXPECT_LE(s.peakBytes, p.budgetBytes);
    freed = freed || !s.freed.empty();
  }
  EXPECT_TRUE(freed);
  EXPECT_GE(plan.stepTime, unlimited.stepTime);
  // No worse than equal node counts with the best actions for those cuts.
  std::vector<int> equal;
  for (int k = 1; k < 8; ++k) equal.push_back(k * 625 + (k * 625 % 5 == 2 ? 1 : 0));
  try {
    auto even = partitionWithCuts(p, equal);
    EXPECT_LE(plan.stepTime, even.stepTime);
  } catch (const PlanError&) {
    // equal cuts may not fit at all; the optimum still does
  }
}

}  // namespace
}  // namespace sluice::partition
