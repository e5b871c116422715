#include "partition/Partitioner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/Error.h"
#include "memory/MemoryAccounting.h"

namespace sluice::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// What a stage over [first, end) must free, in memory units, for stage k.
// Returns -1 when it can never fit (its static memory exceeds the budget).
int64_t neededUnits(const Problem& p, int k, int64_t paramBytes, int64_t savedBytes) {
  if (p.budgetBytes <= 0) return 0;
  const int64_t staticBytes = static_cast<int64_t>(static_cast<double>(paramBytes) * p.staticPerParamByte);
  if (staticBytes > p.budgetBytes) return -1;
  const int64_t f = inFlight(p, k);
  const int64_t excess = staticBytes + f * savedBytes - p.budgetBytes;
  if (excess <= 0) return 0;
  const int64_t unit = memoryUnit(p);
  return ((excess + f - 1) / f + unit - 1) / unit;
}

struct Item {
  int node;
  int64_t units;
  double seconds;
  Action action;
};

// Covering knapsack: best[v] = least seconds to free at least v units with the
// items added so far. add() is O(capacity); with `took` it records, per v,
// whether this item is in the best choice so far (to read the choice back).
class Knapsack {
 public:
  void reset(int64_t capacity) { best_.assign(capacity + 1, kInf), best_[0] = 0; }
  int64_t capacity() const { return static_cast<int64_t>(best_.size()) - 1; }
  void add(const Item& it, std::vector<char>* took = nullptr) {
    if (took) took->assign(best_.size(), 0);
    for (int64_t v = capacity(); v >= 1; --v) {
      const double via = best_[std::max<int64_t>(0, v - it.units)] + it.seconds;
      if (via < best_[v]) {
        best_[v] = via;
        if (took) (*took)[v] = 1;
      }
    }
  }
  double at(int64_t v) const { return best_[v]; }

 private:
  std::vector<double> best_;
};

bool freeable(const Problem& p, int j, Item* item) {
  double seconds = 0;
  Action a = cheapestFree(p, j, &seconds);
  if (a == Action::Keep) return false;
  *item = {j, p.nodes[j].saved / memoryUnit(p), seconds, a};
  return true;
}

// A point of a Pareto front: the best split of nodes [0, j) into k + 1 stages
// for its (max stage time, sum of stage times); prev indexes the front of the
// stage before, at node `start`.
struct Point {
  double worst, sum;
  int start, prev;
};

// Keeps the front sorted by worst ascending, sum strictly descending.
void insert(std::vector<Point>& front, const Point& q) {
  for (auto& r : front) {
    if (r.worst <= q.worst && r.sum <= q.sum) return;  // dominated (or equal)
  }
  front.erase(std::remove_if(front.begin(), front.end(),
                             [&](const Point& r) { return r.worst >= q.worst && r.sum >= q.sum; }),
              front.end());
  auto at = std::lower_bound(front.begin(), front.end(), q, [](const Point& a, const Point& b) { return a.worst < b.worst; });
  front.insert(at, q);
}

bool canEnd(const Problem& p, int k, int j) {
  const int n = p.numNodes(), last = p.stages - 1;
  if (k == last) return j == n;
  return j < n && p.validCut[j] && j <= n - (last - k);
}

std::string formatMiB(int64_t bytes) { return memory::formatBytes(bytes) + " (" + std::to_string(bytes) + " bytes)"; }

// The optimum's cuts and step time; false when nothing fits.
bool optimalCuts(const Problem& p, std::vector<int>* cutsOut, double* best) {
  const int n = p.numNodes(), stages = p.stages;
  std::vector<std::vector<std::vector<Point>>> fronts(stages, std::vector<std::vector<Point>>(n + 1));
  const std::vector<Point> origin{{0, 0, -1, -1}};
  Knapsack knap;
  std::vector<Item> items;
  for (int i = 0; i < n; ++i) {
    // Stages that may start at node i, each with the (final) front it extends.
    std::vector<std::pair<int, const std::vector<Point>*>> active;
    if (i == 0) active.push_back({0, &origin});
    if (i > 0 && p.validCut[i]) {
      for (int k = 1; k < stages; ++k) {
        if (!fronts[k - 1][i].empty()) active.push_back({k, &fronts[k - 1][i]});
      }
    }
    if (active.empty()) continue;
    items.clear();
    knap.reset(0);
    int64_t params = 0, saved = 0, freeableUnits = 0;
    double compute = 0;
    const double commIn = commSeconds(p, i);
    for (int j = i + 1; j <= n && !active.empty(); ++j) {
      const auto& c = p.nodes[j - 1];
      params += c.params;
      saved += c.saved;
      compute += c.forward + c.backward;
      Item it;
      if (freeable(p, j - 1, &it)) {
        items.push_back(it);
        freeableUnits += it.units;
        knap.add(it);
      }
      for (size_t a = 0; a < active.size();) {
        const int k = active[a].first;
        const int64_t need = neededUnits(p, k, params, saved);
        if (need < 0 || need > freeableUnits) {  // never fits again: needs grow faster than freeable units
          active.erase(active.begin() + static_cast<long>(a));
          continue;
        }
        ++a;
        if (!canEnd(p, k, j)) continue;
        if (need > knap.capacity()) {
          knap.reset(std::min(freeableUnits, std::max(need, 2 * knap.capacity())));
          for (auto& x : items) knap.add(x);
        }
        const double t = compute + knap.at(need) + commIn + commSeconds(p, j) + (j == n ? p.lossSeconds : 0);
        const auto& from = *active[a - 1].second;
        auto& to = fronts[k][j];
        // Points of `from` with worst <= t all become (t, sum + t): only the last of them (least sum) matters.
        int lastBelow = -1;
        for (int q = 0; q < static_cast<int>(from.size()); ++q) {
          if (from[q].worst <= t) {
            lastBelow = q;
          } else {
            insert(to, {from[q].worst, from[q].sum + t, i, q});
          }
        }
        if (lastBelow >= 0) insert(to, {t, from[lastBelow].sum + t, i, lastBelow});
      }
    }
  }
  const auto& final = fronts[stages - 1][n];
  if (final.empty()) return false;
  int pick = 0;
  double bestTime = kInf;
  for (int q = 0; q < static_cast<int>(final.size()); ++q) {
    const double t = final[q].sum + (p.microBatches - 1) * final[q].worst;
    if (t < bestTime) bestTime = t, pick = q;
  }
  *best = bestTime;
  std::vector<int> cuts;
  int k = stages - 1, q = pick;
  const Point* pt = &final[q];
  while (k > 0) {
    cuts.push_back(pt->start);
    pt = &fronts[k - 1][pt->start][pt->prev];
    --k;
  }
  std::reverse(cuts.begin(), cuts.end());
  *cutsOut = cuts;
  return true;
}

}  // namespace

StageCost bestStage(const Problem& p, int stage, int first, int end) {
  int64_t params = 0, saved = 0;
  std::vector<Item> items;
  for (int j = first; j < end; ++j) {
    params += p.nodes[j].params;
    saved += p.nodes[j].saved;
    Item it;
    if (freeable(p, j, &it)) items.push_back(it);
  }
  int64_t need = neededUnits(p, stage, params, saved), total = 0;
  for (auto& it : items) total += it.units;
  if (need < 0 || need > total) {  // report the stage with everything freeable freed
    std::vector<std::pair<int, Action>> all;
    for (auto& it : items) all.emplace_back(it.node, it.action);
    auto s = evaluateStage(p, stage, first, end, all);
    s.fits = false;
    return s;
  }
  // The knapsack partitionOptimal runs, recording choices to read the actions back.
  Knapsack knap;
  knap.reset(need);
  std::vector<std::vector<char>> took(items.size());
  for (size_t x = 0; x < items.size(); ++x) knap.add(items[x], &took[x]);
  std::vector<std::pair<int, Action>> freed;
  for (int64_t x = static_cast<int64_t>(items.size()) - 1, v = need; x >= 0 && v > 0; --x) {
    if (took[x][v]) {
      freed.emplace_back(items[x].node, items[x].action);
      v = std::max<int64_t>(0, v - items[x].units);
    }
  }
  std::reverse(freed.begin(), freed.end());
  auto s = evaluateStage(p, stage, first, end, freed);
  SLUICE_CHECK(s.fits, PlanError, "partition: internal error: stage " << stage << " chosen actions do not fit");
  return s;
}

Partition partitionWithCuts(const Problem& p, const std::vector<int>& cuts) {
  p.validate();
  SLUICE_CHECK(static_cast<int>(cuts.size()) == p.stages - 1, PlanError,
               "partition: " << p.stages << " stages need " << p.stages - 1 << " cuts, got " << cuts.size());
  Partition out;
  out.cuts = cuts;
  for (int k = 0; k < p.stages; ++k) {
    const int first = k == 0 ? 0 : cuts[k - 1], end = k + 1 == p.stages ? p.numNodes() : cuts[k];
    SLUICE_CHECK(first < end && (k == 0 || p.validCut[first]), PlanError,
                 "partition: cut " << first << " is out of order or not a valid cut");
    auto s = bestStage(p, k, first, end);
    SLUICE_CHECK(s.fits, PlanError,
                 "partition: stage " << k << " (nodes [" << first << ", " << end << ")) needs at least "
                                     << formatMiB(s.peakBytes) << " even with every freeable tensor freed; the budget is "
                                     << formatMiB(p.budgetBytes) << ". Raise memory.budget_mb or use more stages");
    out.stages.push_back(std::move(s));
  }
  out.stepTime = stepTime(out.stages, p.microBatches);
  return out;
}

int64_t minimalBudget(const Problem& p) {
  // A lower bound first: min over splits of the largest stage memory with
  // every tensor that some action may free freed (unit rounding ignored).
  const int n = p.numNodes(), stages = p.stages;
  std::vector<int64_t> params(n + 1, 0), stuck(n + 1, 0);
  for (int j = 0; j < n; ++j) {
    const auto& c = p.nodes[j];
    const bool canFree = c.recomputable || p.swapSecondsPerByte > 0;
    params[j + 1] = params[j] + c.params;
    stuck[j + 1] = stuck[j] + (canFree ? 0 : c.saved);
  }
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> dp(stages, std::vector<int64_t>(n + 1, inf));
  for (int k = 0; k < stages; ++k) {
    for (int j = 1; j <= n; ++j) {
      if (!canEnd(p, k, j)) continue;
      for (int i = (k == 0 ? 0 : k); i < j; ++i) {
        if (k == 0 && i != 0) break;
        if (k > 0 && (!p.validCut[i] || dp[k - 1][i] == inf)) continue;
        const int64_t mem = static_cast<int64_t>(static_cast<double>(params[j] - params[i]) * p.staticPerParamByte) +
                            inFlight(p, k) * (stuck[j] - stuck[i]);
        dp[k][j] = std::min(dp[k][j], std::max(k == 0 ? 0 : dp[k - 1][i], mem));
      }
    }
  }
  if (dp[stages - 1][n] == inf) return -1;
  // Then up until the exact (unit-rounded) model finds a plan.
  Problem q = p;
  int64_t budget = std::max<int64_t>(1, dp[stages - 1][n]);
  for (int tries = 0; tries < 200; ++tries) {
    q.budgetBytes = budget;
    double t = 0;
    std::vector<int> cuts;
    if (optimalCuts(q, &cuts, &t)) return budget;
    budget += std::max<int64_t>(1, budget / 256);
  }
  return -1;
}

Partition partitionOptimal(const Problem& p) {
  p.validate();
  int validCount = 0;
  for (int c = 1; c < p.numNodes(); ++c) validCount += p.validCut[c] ? 1 : 0;
  SLUICE_CHECK(validCount >= p.stages - 1, PlanError,
               "partition: the graph has " << validCount << " valid cut points, too few for " << p.stages << " stages");
  double best = 0;
  std::vector<int> cuts;
  if (!optimalCuts(p, &cuts, &best)) {
    const int64_t need = minimalBudget(p);
    std::ostringstream os;
    os << "partition: no split into " << p.stages << " stages fits the budget of " << formatMiB(p.budgetBytes)
       << " per stage";
    if (need > 0) {
      // In MiB, rounded up to 1/100 so that the number given fits.
      const double mib = std::ceil(static_cast<double>(need) * 100.0 / (1 << 20)) / 100.0;
      os << "; the smallest budget that fits is " << formatMiB(need) << ": set memory.budget_mb to at least " << mib
         << " (or pass --budget-mb)";
    }
    throw PlanError(os.str());
  }
  auto out = partitionWithCuts(p, cuts);
  SLUICE_CHECK(std::abs(out.stepTime - best) <= 1e-9 * std::max(1.0, best), PlanError,
               "partition: internal error: the DP predicted " << best << " s, the chosen stages " << out.stepTime);
  return out;
}

}  // namespace sluice::partition
