#include "partition/Partitioner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/Bytes.h"
#include "core/Error.h"
#include "partition/Knapsack.h"

namespace sluice::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t unitsFor(int64_t excess, int inFlight, int64_t unit) {
  if (excess <= 0) return 0;
  return ((excess + inFlight - 1) / inFlight + unit - 1) / unit;
}

// What a stage [first, end) holds and needs, accumulated one node at a time.
struct StageSums {
  int first = 0;
  int64_t params = 0, saved = 0;
  // transientBound() incrementally: freeable storages whose span covers the
  // current node, and the largest node workspace + that.
  int64_t active = 0, workspace = 0, nodeWorkspace = 0;
  std::multimap<int, int64_t> expiring;  // last reader -> bytes
  double compute = 0;
  std::vector<KnapsackItem> items;
  int64_t freeableAll = 0, freeableRecompute = 0;

  void addNode(const Problem& p, int j) {
    const auto& c = p.nodes[j];
    params += c.params;
    while (!expiring.empty() && expiring.begin()->first < j) {
      active -= expiring.begin()->second;
      expiring.erase(expiring.begin());
    }
    nodeWorkspace = c.workspace;
    compute += c.forward + c.backward;
  }
  void enter(int64_t bytes) { saved += bytes; }
  // After node j's entrants: its bound candidate.
  void closeNode() { workspace = std::max(workspace, nodeWorkspace + active); }
  // Storage x enters the stage (its first saver is now inside).
  bool addStorage(const Problem& p, int x, KnapsackItem* item) {
    const auto& st = p.storages[x];
    enter(st.bytes);
    KnapsackItem it;
    it.storage = x;
    it.units = p.budgetBytes > 0 ? st.bytes / memoryUnit(p) : 0;
    it.recompute = recomputeSeconds(p, x, first);
    it.swap = p.swapSecondsPerByte > 0 ? p.swapSecondsPerByte * static_cast<double>(st.bytes) : kInf;
    if (it.units <= 0 || (it.recompute == kInf && it.swap == kInf)) return false;
    active += st.bytes;
    expiring.emplace(st.lastReader, st.bytes);
    freeableAll += it.units;
    if (it.recompute < kInf) freeableRecompute += it.units;
    items.push_back(it);
    *item = it;
    return true;
  }
  int64_t staticBytes(const Problem& p) const {
    return static_cast<int64_t>(static_cast<double>(params) * p.staticPerParamByte);
  }
  // The budget bound with everything kept, less the budget; see CostModel.h.
  int64_t excess(const Problem& p, int k, int end, bool window) const { return excessWith(p, k, end, window, saved); }
  int64_t excessWith(const Problem& p, int k, int end, bool window, int64_t savedBytes) const {
    const bool last = end == p.numNodes();
    const int64_t boundary = first == 0 ? 0 : p.cutBytes[first];
    const int64_t transient = std::max(workspace, last ? p.lossWorkspace : 0) +
                              (first == 0 ? p.microBatches * p.cutBytes[0] : p.cutBytes[first]) +
                              (last ? 0 : p.cutBytes[end]);
    return staticBytes(p) + inFlight(p, k) * (boundary + savedBytes + (last ? p.lossSavedBytes : 0)) + transient +
           (window ? p.swapWindowBytes : 0) - p.budgetBytes;
  }
  // A lower bound of excess() that never decreases as the stage grows.
  int64_t monotoneExcess(const Problem& p, int k) const {
    const int64_t boundary = first == 0 ? 0 : p.cutBytes[first];
    return staticBytes(p) + inFlight(p, k) * (boundary + saved) + workspace +
           (first == 0 ? p.microBatches * p.cutBytes[0] : p.cutBytes[first]) - p.budgetBytes;
  }
};

// Storages by first saver, so a stage growing by one node adds its entrants.
std::vector<std::vector<int>> storagesByFirstSaver(const Problem& p) {
  std::vector<std::vector<int>> out(p.numNodes());
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) out[p.storages[x].firstSaver].push_back(x);
  return out;
}

// How far a stage starting at `first` can grow: until it can never fit, for
// any stage index (the DP's rule). Its compute bounds what swap I/O can hide
// behind (which keeps the knapsack fronts short, Knapsack.h); its freeable
// units bound what any end needs (so the knapsacks are sized once).
struct Reach {
  double compute = 0;   // the most compute of a stage starting here
  int64_t units = 0;    // the most units it could free
};
Reach maxReach(const Problem& p, int first, const std::vector<std::vector<int>>& entrants) {
  std::set<int> flights;
  for (int k = 0; k < p.stages; ++k) flights.insert(inFlight(p, k));
  StageSums sums;
  sums.first = first;
  for (int j = first; j < p.numNodes(); ++j) {
    sums.addNode(p, j);
    for (int x : entrants[j]) {
      KnapsackItem it;
      if (p.storages[x].producer >= first) sums.addStorage(p, x, &it);
    }
    sums.closeNode();
    if (p.budgetBytes > 0) {
      bool fitsSome = false;
      for (int f : flights) {
        const int64_t e = sums.staticBytes(p) + f * ((first == 0 ? 0 : p.cutBytes[first]) + sums.saved) +
                          sums.workspace + (first == 0 ? p.microBatches * p.cutBytes[0] : p.cutBytes[first]) -
                          p.budgetBytes;
        fitsSome = fitsSome || unitsFor(e, f, memoryUnit(p)) <= sums.freeableAll;
      }
      if (!fitsSome) break;
    }
  }
  return {sums.compute, sums.freeableAll};
}

// Both knapsacks of one stage start, grown on demand.
struct StageKnapsacks {
  RecomputeKnapsack recompute;
  FrontKnapsack front;
  bool swap;
  StageKnapsacks(const Problem& p, const Reach& reach) : front(reach.compute), swap(p.swapSecondsPerByte > 0) {
    recompute.reset(reach.units);
    front.reset(swap ? reach.units : 0);
  }
  void add(const KnapsackItem& it) {
    recompute.add(it);
    if (swap) front.add(it);
  }
  void ensure(int64_t need, const StageSums& sums) {
    if (need <= recompute.capacity()) return;
    const int64_t cap = std::min(sums.freeableAll, std::max(need, 2 * recompute.capacity()));
    recompute.reset(cap);
    if (swap) front.reset(cap);
    for (auto& it : sums.items) add(it);
  }
  // Least extra seconds (recompute + swap stall) for stage k ending at `end`; +inf if it cannot fit.
  double best(const Problem& p, const StageSums& sums, int k, int end) {
    if (p.budgetBytes <= 0) return 0;
    const int64_t unit = memoryUnit(p), f = inFlight(p, k);
    const int64_t needA = unitsFor(sums.excess(p, k, end, false), f, unit);
    double best = kInf;
    if (needA == 0) return 0;
    if (needA <= sums.freeableRecompute) {
      ensure(needA, sums);
      best = recompute.at(needA);
    }
    if (swap) {
      const int64_t needB = unitsFor(sums.excess(p, k, end, true), f, unit);
      if (needB <= sums.freeableAll) {
        ensure(needB, sums);
        best = std::min(best, front.best(needB, sums.compute));
      }
    }
    return best;
  }
};

// A point of a Pareto front: the best split of nodes [0, j) into k + 1 stages
// for its (max stage time, sum of stage times); prev indexes the front of the
// stage before, at node `start`.
struct Point {
  double worst, sum;
  int start, prev;
};

// Merges `points` (sorted by worst ascending, sum descending) into `front`
// (the same order, sum strictly descending): the Pareto front of both, in
// O(|front| + |points|).
void mergeFront(std::vector<Point>& front, const std::vector<Point>& points, std::vector<Point>& scratch) {
  scratch.clear();
  size_t a = 0, b = 0;
  double bestSum = std::numeric_limits<double>::infinity();
  while (a < front.size() || b < points.size()) {
    const bool takeFront = b >= points.size() ||
                           (a < front.size() && (front[a].worst < points[b].worst ||
                                                 (front[a].worst == points[b].worst && front[a].sum <= points[b].sum)));
    const Point& q = takeFront ? front[a++] : points[b++];
    if (q.sum < bestSum) {
      bestSum = q.sum;
      scratch.push_back(q);
    }
  }
  front.swap(scratch);
}

bool canEnd(const Problem& p, int k, int j) {
  const int n = p.numNodes(), last = p.stages - 1;
  if (k == last) return j == n;
  return j < n && p.validCut[j] && j <= n - (last - k);
}

// The optimum's cuts and step time; false when nothing fits.
bool optimalCuts(const Problem& p, std::vector<int>* cutsOut, double* best) {
  const int n = p.numNodes(), stages = p.stages;
  const auto entrants = storagesByFirstSaver(p);
  std::vector<std::vector<std::vector<Point>>> fronts(stages, std::vector<std::vector<Point>>(n + 1));
  const std::vector<Point> origin{{0, 0, -1, -1}};
  std::vector<Point> extended, scratch;
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
    StageSums sums;
    sums.first = i;
    StageKnapsacks knap(p, maxReach(p, i, entrants));
    const double commIn = commSeconds(p, i);
    for (int j = i + 1; j <= n && !active.empty(); ++j) {
      sums.addNode(p, j - 1);
      for (int x : entrants[j - 1]) {
        if (p.storages[x].producer < i) continue;
        KnapsackItem it;
        if (sums.addStorage(p, x, &it)) knap.add(it);
      }
      sums.closeNode();
      for (size_t a = 0; a < active.size();) {
        const int k = active[a].first;
        if (p.budgetBytes > 0 &&
            unitsFor(sums.monotoneExcess(p, k), inFlight(p, k), memoryUnit(p)) > sums.freeableAll) {
          active.erase(active.begin() + static_cast<long>(a));  // never fits again
          continue;
        }
        ++a;
        if (!canEnd(p, k, j)) continue;
        const double extra = knap.best(p, sums, k, j);
        if (extra == kInf) continue;
        const double t = sums.compute + extra + commIn + commSeconds(p, j) + (j == n ? p.lossSeconds : 0);
        const auto& from = *active[a - 1].second;
        // Points of `from` with worst <= t all become (t, sum + t): only the
        // last of them (least sum) matters; the others keep their worst.
        extended.clear();
        int lastBelow = -1;
        for (int q = 0; q < static_cast<int>(from.size()); ++q) {
          if (from[q].worst <= t) lastBelow = q;
        }
        if (lastBelow >= 0) extended.push_back({t, from[lastBelow].sum + t, i, lastBelow});
        for (int q = lastBelow + 1; q < static_cast<int>(from.size()); ++q) {
          extended.push_back({from[q].worst, from[q].sum + t, i, q});
        }
        mergeFront(fronts[k][j], extended, scratch);
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
  int k = stages - 1;
  const Point* pt = &final[pick];
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
  StageSums sums;
  sums.first = first;
  std::vector<KnapsackItem> items;
  const auto entrants = storagesByFirstSaver(p);
  for (int j = first; j < end; ++j) {
    sums.addNode(p, j);
    for (int x : entrants[j]) {
      KnapsackItem it;
      if (p.storages[x].producer >= first && sums.addStorage(p, x, &it)) items.push_back(it);
    }
    sums.closeNode();
  }
  auto everything = [&] {
    std::vector<std::pair<int, Action>> all;
    for (auto& it : items) all.emplace_back(it.storage, it.recompute < kInf ? Action::Recompute : Action::Swap);
    auto s = evaluateStage(p, stage, first, end, all);
    s.fits = false;
    return s;
  };
  if (p.budgetBytes <= 0) return evaluateStage(p, stage, first, end, {});
  const int64_t unit = memoryUnit(p), f = inFlight(p, stage);
  const int64_t needA = unitsFor(sums.excess(p, stage, end, false), f, unit);
  const int64_t needB = unitsFor(sums.excess(p, stage, end, true), f, unit);
  if (needA == 0) return evaluateStage(p, stage, first, end, {});
  // Recompute only, recording choices to read them back.
  std::vector<std::pair<int, Action>> freedA, freedB;
  double costA = kInf, costB = kInf;
  if (needA <= sums.freeableRecompute) {
    RecomputeKnapsack knap;
    knap.reset(needA);
    std::vector<std::vector<char>> took(items.size());
    for (size_t x = 0; x < items.size(); ++x) knap.add(items[x], &took[x]);
    costA = knap.at(needA);
    for (int64_t x = static_cast<int64_t>(items.size()) - 1, v = needA; x >= 0 && v > 0; --x) {
      if (took[x][v]) {
        freedA.emplace_back(items[x].storage, Action::Recompute);
        v = std::max<int64_t>(0, v - items[x].units);
      }
    }
  }
  if (p.swapSecondsPerByte > 0 && needB <= sums.freeableAll) {
    FrontKnapsack knap(std::max(sums.compute, maxReach(p, first, entrants).compute), /*record=*/true);
    knap.reset(needB);
    for (auto& it : items) knap.add(it);
    int point = -1;
    costB = knap.best(needB, sums.compute, &point);
    if (costB < kInf) {
      auto choice = knap.choices(needB, point);
      for (size_t x = 0; x < items.size(); ++x) {
        if (choice[x]) freedB.emplace_back(items[x].storage, choice[x] == 1 ? Action::Recompute : Action::Swap);
      }
    }
  }
  if (costA == kInf && costB == kInf) return everything();
  auto freed = costA <= costB ? freedA : freedB;
  std::sort(freed.begin(), freed.end());
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
                                     << formatBytesExact(s.peakBytes) << " even with every freeable tensor freed; the "
                                     << "budget is " << formatBytesExact(p.budgetBytes)
                                     << ". Raise memory.budget_mb or use more stages");
    out.stages.push_back(std::move(s));
  }
  out.stepTime = stepTime(out.stages, p.microBatches);
  return out;
}

int64_t minimalBudget(const Problem& p) {
  // A lower bound first: min over splits of the largest stage memory with
  // every freeable storage freed (unit rounding and the window ignored).
  const int n = p.numNodes(), stages = p.stages;
  const auto entrants = storagesByFirstSaver(p);
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> dp(stages, std::vector<int64_t>(n + 1, inf));
  Problem q = p;  // budget 0: excess() is the memory itself
  q.budgetBytes = 0;
  for (int i = 0; i < n; ++i) {
    if (i > 0 && !p.validCut[i]) continue;
    StageSums sums;
    sums.first = i;
    int64_t stuck = 0;
    for (int j = i + 1; j <= n; ++j) {
      sums.addNode(p, j - 1);
      for (int x : entrants[j - 1]) {
        const auto& st = p.storages[x];
        if (st.producer < i) continue;
        const bool canFree = p.swapSecondsPerByte > 0 || recomputeSeconds(p, x, i) < kInf;
        if (!canFree) stuck += st.bytes;
        KnapsackItem it;
        sums.addStorage(q, x, &it);
      }
      sums.closeNode();
      for (int k = (i == 0 ? 0 : 1); k < stages; ++k) {
        if (!canEnd(p, k, j)) continue;
        if (k > 0 && dp[k - 1][i] == inf) continue;
        if (k == 0 && i != 0) continue;
        const int64_t mem = sums.excessWith(q, k, j, false, stuck);  // budget 0: the memory itself
        dp[k][j] = std::min(dp[k][j], std::max(k == 0 ? 0 : dp[k - 1][i], mem));
      }
    }
  }
  if (dp[stages - 1][n] == inf) return -1;
  // Then up until the exact (unit-rounded) model finds a plan.
  q = p;
  int64_t budget = std::max<int64_t>(1, dp[stages - 1][n]);
  for (int tries = 0; tries < 400; ++tries) {
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
    os << "partition: no split into " << p.stages << " stages fits the budget of " << formatBytesExact(p.budgetBytes)
       << " per stage";
    if (need > 0) {
      // In MiB, rounded up to 1/100 so that the number given fits.
      const double mib = std::ceil(static_cast<double>(need) * 100.0 / (1 << 20)) / 100.0;
      os << "; the smallest budget that fits is " << formatBytesExact(need) << ": set memory.budget_mb to at least "
         << mib << " (or pass --budget-mb)";
    }
    throw PlanError(os.str());
  }
  auto out = partitionWithCuts(p, cuts);
  SLUICE_CHECK(std::abs(out.stepTime - best) <= 1e-9 * std::max(1.0, best), PlanError,
               "partition: internal error: the DP predicted " << best << " s, the chosen stages " << out.stepTime);
  return out;
}

}  // namespace sluice::partition
