#include "partition/Partitioner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/Bytes.h"
#include "core/Error.h"
#include "partition/Knapsack.h"
#include "partition/StageSums.h"

namespace sluice::partition {

using namespace detail;

namespace {

// How far a stage starting at `first` can grow: until it can never fit, for
// any stage index (the DP's rule). Its compute bounds what swap I/O can hide
// behind (which keeps the knapsack fronts short, Knapsack.h); its freeable
// units bound what any end needs (so the knapsacks are sized once).
struct Reach {
  double compute = 0;
  int64_t units = 0;
};
Reach maxReach(const Context& ctx, int first) {
  auto sums = ctx.sums(first);
  for (int j = first; j < ctx.p.numNodes(); ++j) {
    ctx.grow(sums, j, nullptr);
    bool fitsSome = false;
    for (int f : ctx.flights) fitsSome = fitsSome || !ctx.neverFits(sums, f);
    if (!fitsSome) break;
  }
  return {sums.compute, sums.freeableAll};
}

// The three knapsacks of one stage start.
struct StageKnapsacks {
  AdditiveKnapsack recompute{AdditiveKnapsack::Cost::Recompute};
  FrontKnapsack swap, both;
  bool swapTier;
  StageKnapsacks(const Problem& p, const Reach& reach)
      : swap(reach.compute, false, /*swapOnly=*/true), both(reach.compute), swapTier(p.swapSecondsPerByte > 0) {
    recompute.reset(reach.units);
    swap.reset(swapTier ? reach.units : 0);
    both.reset(swapTier ? reach.units : 0);
  }
  void add(const KnapsackItem& it) {
    recompute.add(it);
    if (swapTier) {
      swap.add(it);
      both.add(it);
    }
  }
  // Least extra seconds (recompute + swap stall) for stage k ending at `end`; +inf if it cannot fit
  // (exactly when !stageCanFit: a variant's knapsack is finite where its need is freeable).
  double best(const Problem& p, const StageSums& s, int k, int end) const {
    if (p.budgetBytes <= 0 || s.need(p, k, end, Variant::Keep) == 0) return 0;
    const int64_t needRecompute = s.need(p, k, end, Variant::Recompute);
    if (needRecompute == 0) return 0;
    double best = kInf;
    if (needRecompute <= std::min(s.freeableRecompute, recompute.capacity())) best = recompute.at(needRecompute);
    if (!swapTier) return best;
    const int64_t needSwap = s.need(p, k, end, Variant::Swap);
    if (needSwap <= std::min(s.freeableSwap, swap.capacity())) best = std::min(best, swap.best(needSwap, s.compute));
    const int64_t needBoth = s.need(p, k, end, Variant::Both);
    if (needBoth <= std::min(s.freeableAll, both.capacity())) best = std::min(best, both.best(needBoth, s.compute));
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

// The optimum's cuts and step time; false when nothing fits.
// An upper bound of the optimal step time: cuts that balance compute,
// snapped to valid cuts, with their best actions; +inf when they do not fit.
// A stage with m x its compute above it is in no optimal plan (the step time
// is at least m x any stage's time), which bounds how far a stage grows.
double balancedUpperBound(const Problem& p) {
  const int n = p.numNodes();
  std::vector<double> prefix(n + 1, 0);
  for (int j = 0; j < n; ++j) prefix[j + 1] = prefix[j] + p.nodes[j].forward + p.nodes[j].backward;
  std::vector<int> cuts;
  int prev = 0;
  for (int k = 1; k < p.stages; ++k) {
    const double target = prefix[n] * k / p.stages;
    int best = -1;
    for (int c = prev + 1; c <= n - (p.stages - k); ++c) {
      if (p.validCut[c] && (best < 0 || std::abs(prefix[c] - target) < std::abs(prefix[best] - target))) best = c;
    }
    if (best < 0) return kInf;
    cuts.push_back(prev = best);
  }
  std::vector<StageCost> stages;
  for (int k = 0; k < p.stages; ++k) {
    const int first = k == 0 ? 0 : cuts[k - 1], end = k + 1 == p.stages ? n : cuts[k];
    stages.push_back(bestStage(p, k, first, end));
    if (!stages.back().fits) return kInf;
  }
  return stepTime(stages, p.microBatches);
}

// The DP's Pareto fronts: per stage k and node j, the splits of [0, j) into
// k + 1 stages.
using Fronts = std::vector<std::vector<std::vector<Point>>>;
// A stage index with the front it extends.
using ActiveStage = std::pair<int, const std::vector<Point>*>;

// Stages that may start at node i, each with the (final) front it extends.
std::vector<ActiveStage> stagesStartingAt(const Problem& p, const Fronts& fronts, const std::vector<Point>& origin,
                                          int i) {
  std::vector<ActiveStage> active;
  if (i == 0) active.push_back({0, &origin});
  if (i > 0 && p.validCut[i]) {
    for (int k = 1; k < p.stages; ++k) {
      if (!fronts[k - 1][i].empty()) active.push_back({k, &fronts[k - 1][i]});
    }
  }
  return active;
}

// Into extended: the points of `from` followed by a stage of t seconds
// starting at node i.
void extendFront(const std::vector<Point>& from, double t, int i, std::vector<Point>& extended) {
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
}

// The least step time on the last stage's front at the graph's end, and its
// cuts read back through the fronts; false when that front is empty.
bool readBackCuts(const Problem& p, const Fronts& fronts, std::vector<int>* cutsOut, double* best) {
  const int n = p.numNodes(), stages = p.stages;
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

// The DP with stages pruned above `upper` (see balancedUpperBound): finds the
// optimum whenever the optimum's step time is at most `upper`.
bool optimalCutsBelow(const Problem& p, double upper, std::vector<int>* cutsOut, double* best) {
  const int n = p.numNodes(), stages = p.stages;
  const Context ctx(p);
  Fronts fronts(stages, std::vector<std::vector<Point>>(n + 1));
  const std::vector<Point> origin{{0, 0, -1, -1}};
  std::vector<Point> extended, scratch;
  std::vector<KnapsackItem> added;
  for (int i = 0; i < n; ++i) {
    auto active = stagesStartingAt(p, fronts, origin, i);
    if (active.empty()) continue;
    auto sums = ctx.sums(i);
    StageKnapsacks knap(p, p.budgetBytes > 0 ? maxReach(ctx, i) : Reach{});
    const double commIn = commSeconds(p, i);
    for (int j = i + 1; j <= n && !active.empty(); ++j) {
      added.clear();
      ctx.grow(sums, j - 1, &added);
      if (p.microBatches * sums.compute > upper) break;  // in no optimal plan, nor is any longer stage
      for (auto& it : added) knap.add(it);
      for (size_t a = 0; a < active.size();) {
        const int k = active[a].first;
        if (ctx.neverFits(sums, holdingFactor(p, k, sums.first))) {
          active.erase(active.begin() + static_cast<long>(a));
          continue;
        }
        ++a;
        if (!canEnd(p, k, j)) continue;
        const double extra = knap.best(p, sums, k, j);
        if (extra == kInf) continue;
        const double t = sums.compute + extra + commIn + commSeconds(p, j) + (j == n ? p.lossSeconds : 0);
        extendFront(*active[a - 1].second, t, i, extended);
        mergeFront(fronts[k][j], extended, scratch);
      }
    }
  }
  return readBackCuts(p, fronts, cutsOut, best);
}

// The optimum's cuts and step time; false when nothing fits. The pruning
// bound starts from a feasible plan (balanced compute) or, without one, from
// a lower bound of the step time, and grows until the plan found is within it
// (then no optimal stage was pruned) or it is infinite.
bool optimalCuts(const Problem& p, std::vector<int>* cutsOut, double* best) {
  double upper = kInf;
  if (p.prune && p.numNodes() >= 256) {  // small graphs: the plain DP is fast enough
    upper = balancedUpperBound(p);
    if (upper == kInf) {
      double total = 0;
      for (auto& c : p.nodes) total += c.forward + c.backward;
      double guess = 1.25 * total * (1.0 + (p.microBatches - 1.0) / p.stages);
      for (int tries = 0; tries < 3; ++tries, guess *= 4) {
        if (!optimalCutsBelow(p, guess * (1 + 1e-9), cutsOut, best)) continue;
        if (*best <= guess) return true;
        upper = *best;  // a feasible plan's step time: certainly holds the optimum
        break;
      }
    }
  }
  return optimalCutsBelow(p, upper * (1 + 1e-9), cutsOut, best);
}

// bestStage's variants: each reads back its choices into bestFreed when it
// is cheaper than bestCost (the cheapest so far).

// Recompute only (additive): the least recompute seconds freeing `need` units.
void tryRecomputeOnly(const std::vector<KnapsackItem>& items, int64_t need, double& bestCost,
                      std::vector<std::pair<int, Action>>& bestFreed) {
  AdditiveKnapsack knap(AdditiveKnapsack::Cost::Recompute);
  knap.reset(need);
  std::vector<std::vector<char>> took(items.size());
  for (size_t x = 0; x < items.size(); ++x) knap.add(items[x], &took[x]);
  if (knap.at(need) < bestCost) {
    bestCost = knap.at(need);
    for (int64_t x = static_cast<int64_t>(items.size()) - 1, u = need; x >= 0 && u > 0; --x) {
      if (took[x][u]) {
        bestFreed.emplace_back(items[x].storage, Action::Recompute);
        u = std::max<int64_t>(0, u - items[x].units);
      }
    }
  }
}

// Swap (swapOnly) or swap and recompute: the least seconds freeing `need`
// units with the swap I/O hidden behind `compute`; the front is kept up to
// `hide`.
void tryWithSwap(const std::vector<KnapsackItem>& items, int64_t need, double hide, double compute, bool swapOnly,
                 double& bestCost, std::vector<std::pair<int, Action>>& bestFreed) {
  FrontKnapsack knap(hide, /*record=*/true, /*swapOnly=*/swapOnly);
  knap.reset(need);
  for (auto& it : items) knap.add(it);
  int point = -1;
  const double seconds = knap.best(need, compute, &point);
  if (seconds < bestCost) {
    bestCost = seconds;
    bestFreed.clear();
    auto choice = knap.choices(need, point);
    for (size_t x = 0; x < items.size(); ++x) {
      if (choice[x]) bestFreed.emplace_back(items[x].storage, choice[x] == 1 ? Action::Recompute : Action::Swap);
    }
  }
}

}  // namespace

StageCost bestStage(const Problem& p, int stage, int first, int end) {
  const Context ctx(p);
  auto sums = ctx.sums(first);
  std::vector<KnapsackItem> items;
  for (int j = first; j < end; ++j) ctx.grow(sums, j, &items);
  if (p.budgetBytes <= 0 || sums.need(p, stage, end, Variant::Keep) == 0 ||
      sums.need(p, stage, end, Variant::Recompute) == 0) {
    return evaluateStage(p, stage, first, end, {});
  }
  // Each variant with its choices read back; the cheapest that fits wins.
  double bestCost = kInf;
  std::vector<std::pair<int, Action>> bestFreed;
  {  // recompute only: additive
    const int64_t need = sums.need(p, stage, end, Variant::Recompute);
    if (need <= sums.freeableRecompute) tryRecomputeOnly(items, need, bestCost, bestFreed);
  }
  const double hide = std::max(sums.compute, maxReach(ctx, first).compute);
  for (Variant v : {Variant::Swap, Variant::Both}) {
    if (p.swapSecondsPerByte <= 0) break;
    const int64_t need = sums.need(p, stage, end, v);
    if (need <= sums.freeable(v)) tryWithSwap(items, need, hide, sums.compute, v == Variant::Swap, bestCost, bestFreed);
  }
  if (bestCost == kInf) {  // report the stage with everything freeable freed
    std::vector<std::pair<int, Action>> all;
    for (auto& it : items) all.emplace_back(it.storage, it.recompute < kInf ? Action::Recompute : Action::Swap);
    auto s = evaluateStage(p, stage, first, end, all);
    s.fits = false;
    return s;
  }
  std::sort(bestFreed.begin(), bestFreed.end());
  auto s = evaluateStage(p, stage, first, end, bestFreed);
  SLUICE_CHECK(s.fits, PlanError, "partition: internal error: stage " << stage << " chosen actions do not fit");
  return s;
}

// A budget a message names: `need` per stage, for the rank's `shares` stages
// ("X: set memory.budget_mb to at least Y (or pass --budget-mb)"), in MiB
// rounded up to 1/100 so that the number given fits.
std::string budgetAdvice(int64_t need, int shares) {
  const double mib = std::ceil(static_cast<double>(need) * shares * 100.0 / (1 << 20)) / 100.0;
  std::ostringstream os;
  os << formatBytesExact(need * shares) << ": set memory.budget_mb to at least " << mib << " (or pass --budget-mb)";
  return os.str();
}

Partition partitionOptimal(const Problem& p) {
  p.validate();
  int validCount = 0;
  for (int c = 1; c < p.numNodes(); ++c) validCount += p.validCut[c] ? 1 : 0;
  SLUICE_CHECK(validCount >= p.stages - 1, PlanError,
               "partition: the graph has " << validCount << " valid cut points, too few for " << p.stages << " stages");
  double best = 0;
  std::vector<int> cuts;
  // anySplitFits first: where nothing fits it answers without the knapsacks.
  if ((p.budgetBytes > 0 && !anySplitFits(p)) || !optimalCuts(p, &cuts, &best)) {
    const int64_t need = p.nameSmallestBudget ? minimalBudget(p) : -1;
    std::ostringstream os;
    // With several stages per rank the budget is the rank's, shared equally: name it, not the share.
    const int shares = std::max(1, p.budgetShares);
    os << "partition: no split into " << p.stages << " stages fits the budget of "
       << formatBytesExact(p.budgetBytes * shares) << " per rank"
       << (shares > 1 ? " (" + formatBytesExact(p.budgetBytes) + " for each of its " + std::to_string(shares) + " stages)"
                      : std::string());
    // Several stages per rank: the smallest with equal shares; the planner
    // also tries each rank's stages together (Note [rank budget], Plan.cpp).
    if (need > 0 && shares == 1) os << "; the smallest budget that fits is " << budgetAdvice(need, shares);
    if (need > 0 && shares > 1) {
      os << "; a budget that fits is " << budgetAdvice(need, shares)
         << " (the smallest with an equal share per stage; with each rank's stages together less may fit)";
    }
    throw PlanError(os.str());
  }
  auto out = partitionWithCuts(p, cuts);
  SLUICE_CHECK(std::abs(out.stepTime - best) <= 1e-9 * std::max(1.0, best), PlanError,
               "partition: internal error: the DP predicted " << best << " s, the chosen stages " << out.stepTime);
  return out;
}

}  // namespace sluice::partition
