#include "partition/Partitioner.h"

#include <algorithm>
#include <cmath>
#include <functional>
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

// transientBound() of a growing stage, one node at a time: the freeable
// storages whose span covers the current node, and the largest node
// workspace + that so far.
struct BoundSum {
  const std::vector<int>* spans = nullptr;
  int64_t active = 0, workspace = 0, nodeWorkspace = 0;
  int64_t replay = 0, activeMax = 0;  // chained bound: recompute re-runs (transientBound)
  std::multimap<int, int64_t> expiring;  // span end -> bytes
  void addNode(int j, int64_t ws) {
    while (!expiring.empty() && expiring.begin()->first < j) {
      active -= expiring.begin()->second;
      expiring.erase(expiring.begin());
    }
    nodeWorkspace = ws;
  }
  void addFreeable(int x, int64_t bytes) {
    active += bytes;
    expiring.emplace((*spans)[x], bytes);
  }
  void closeNode() {
    workspace = std::max(workspace, nodeWorkspace + active);
    activeMax = std::max(activeMax, active);
  }
  int64_t bound() const { return std::max(workspace, replay + activeMax); }
};

// The three ways a stage may free memory (Note [freeing variants]): they
// differ in the bound they must fit (the swap window; recompute chains).
enum class Variant { Keep, Recompute, Swap, Both };

// What a stage [first, end) holds and needs, accumulated one node at a time.
struct StageSums {
  int first = 0;
  int64_t params = 0, saved = 0, weightSaved = 0;  // weightSaved: of saved, what a split backward's W reads
  BoundSum plain, chained;  // spans to the last reader; through recompute chains
  double compute = 0;
  std::vector<KnapsackItem> items;
  int64_t freeableAll = 0, freeableRecompute = 0, freeableSwap = 0;

  int64_t unit = 1;  // memoryUnit(p), derived once per Context
  Ratio ratio;       // swapHoldingRatio(p), likewise
  int64_t weightSwappable = 0;  // saved bytes W reads that may be swapped (minimalBudget's lower bound)
  StageSums(int firstNode, int64_t memoryUnitBytes, Ratio swapRatio, const std::vector<int>& lastReaders,
            const std::vector<int>& chainSpans)
      : first(firstNode), unit(memoryUnitBytes), ratio(swapRatio) {
    plain.spans = &lastReaders;
    chained.spans = &chainSpans;
  }
  std::vector<int> sharedReaders;  // per Problem::sharedParams: its readers in the stage so far
  int64_t readerGrads = 0;          // readerGradBytes (CostModel.h)
  void addNode(const Problem& p, int j) {
    const auto& c = p.nodes[j];
    params += c.params;
    // A tied weight first read on an earlier stage: this stage holds a copy;
    // a second reader in the stage, a gradient more (as evaluateStage counts them).
    if (!p.sharedParams.empty()) {
      sharedReaders.resize(p.sharedParams.size(), 0);
      for (size_t x = 0; x < p.sharedParams.size(); ++x) {
        const auto& sp = p.sharedParams[x];
        if (!std::binary_search(sp.readers.begin(), sp.readers.end(), j)) continue;
        if (++sharedReaders[x] == 1 && sp.readers.front() < first) params += sp.bytes;
        if (sharedReaders[x] > 1 && sp.parameter) readerGrads += sp.bytes;
      }
    }
    plain.addNode(j, c.workspace);
    chained.addNode(j, c.workspace);
    compute += c.forward + c.backward;
  }
  void closeNode() {
    plain.closeNode();
    chained.closeNode();
  }
  // Storage x enters the stage (its first saver is now inside); false when it cannot be freed.
  bool addStorage(const Problem& p, int x, KnapsackItem* item) {
    const auto& st = p.storages[x];
    saved += st.bytes;
    if (st.weightReads) weightSaved += st.bytes;
    KnapsackItem it;
    it.storage = x;
    it.units = p.budgetBytes > 0 ? st.bytes / unit : 0;
    it.swapUnits = p.budgetBytes > 0 ? freedUnits(p, x, first, Action::Swap, unit, ratio) : 0;
    it.recompute = recomputeSeconds(p, x, first);
    it.swap = p.swapSecondsPerByte > 0 ? p.swapSecondsPerByte * static_cast<double>(st.bytes) : kInf;
    it.swapCpu = p.swapCpuSecondsPerByte * static_cast<double>(st.bytes);
    if (it.swap < kInf && st.weightReads && first > 0) weightSwappable += st.bytes;  // (any size: a lower bound)
    if (it.units <= 0 || (it.recompute == kInf && it.swap == kInf)) return false;
    plain.addFreeable(x, st.bytes);
    chained.addFreeable(x, st.bytes);
    if (it.recompute < kInf) chained.replay = std::max(chained.replay, segmentWorkspace(p, x, first, p.numNodes()));
    freeableAll += it.swap < kInf ? it.swapped() : it.units;
    if (it.recompute < kInf) freeableRecompute += it.units;
    if (it.swap < kInf) freeableSwap += it.swapped();
    items.push_back(it);
    *item = it;
    return true;
  }
  int64_t staticBytes(const Problem& p) const {
    return static_cast<int64_t>(static_cast<double>(params) * p.staticPerParamByte) + readerGrads;
  }
  int64_t freeable(Variant v) const {
    return v == Variant::Recompute ? freeableRecompute : v == Variant::Swap ? freeableSwap : freeableAll;
  }
  // The budget bound with everything kept, less the budget (CostModel.h).
  int64_t excess(const Problem& p, int k, int end, Variant v, int64_t savedBytes) const {
    const bool last = end == p.numNodes();
    const int64_t boundary = first == 0 ? 0 : p.cutBytes[first];
    const int64_t nodes = v == Variant::Swap || v == Variant::Keep ? plain.bound() : chained.bound();
    const int64_t transient = std::max(nodes, last ? p.lossWorkspace : 0) +
                              (first == 0 ? p.microBatches * p.cutBytes[0] : p.cutBytes[first]) +
                              (last ? 0 : p.cutBytes[end]);
    return staticBytes(p) + holdingFactor(p, k, first) * (boundary + savedBytes + (last ? p.lossSavedBytes : 0)) + transient +
           p.weightHeldBound(k, first, end, weightSaved) +
           (v == Variant::Recompute || v == Variant::Keep ? 0 : p.window()) -
           p.budgetBytes;
  }
  int64_t need(const Problem& p, int k, int end, Variant v) const {
    return unitsFor(excess(p, k, end, v, saved), holdingFactor(p, k, first), unit);
  }
  // A lower bound of every variant's excess that never decreases as the stage grows.
  int64_t monotoneExcess(const Problem& p, int f) const {
    const int64_t boundary = first == 0 ? 0 : p.cutBytes[first];
    return staticBytes(p) + f * (boundary + saved) + plain.workspace +
           (first == 0 ? p.microBatches * p.cutBytes[0] : p.cutBytes[first]) - p.budgetBytes;
  }
};

// Note [freeing variants]: a stage that frees nothing (Keep) needs neither a
// swap window nor recompute's longer spans: when that fits, keeping everything
// is optimal (freeing only adds time), even where the Recompute variant's
// bound, which holds for every recompute choice, would not fit with nothing
// freed. A stage that only recomputes needs no swap window;
// one that only swaps reads nothing back early (its spans end at the last
// reader); one that does both pays both. Each variant is a knapsack of its
// own with its own need, and a stage takes the cheapest that fits. Every
// variant's bound holds for all the choices it may make, so each is exact.

// Storages by first saver, so a stage growing by one node adds its entrants.
std::vector<std::vector<int>> storagesByFirstSaver(const Problem& p) {
  std::vector<std::vector<int>> out(p.numNodes());
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) out[p.storages[x].firstSaver].push_back(x);
  return out;
}

std::vector<int> lastReaders(const Problem& p) {
  std::vector<int> out;
  for (auto& st : p.storages) out.push_back(st.lastReader);
  return out;
}

// Everything a partitioner run computes once per problem.
struct Context {
  const Problem& p;
  std::vector<std::vector<int>> entrants;
  std::vector<int> readers, chains;
  std::set<int> flights;  // distinct holding factors of the stages (holdingFactor, at the first node or later)
  int64_t unit;
  Ratio ratio;
  explicit Context(const Problem& problem)
      : p(problem), entrants(storagesByFirstSaver(problem)), readers(lastReaders(problem)),
        chains(spanEndsBound(problem)), unit(memoryUnit(problem)), ratio(swapHoldingRatio(problem)) {
    for (int k = 0; k < p.stages; ++k) {
      flights.insert(holdingFactor(p, k, 0));
      flights.insert(holdingFactor(p, k, 1));
    }
  }
  StageSums sums(int first) const { return StageSums(first, unit, ratio, readers, chains); }
  // Adds node j and its entrants; the freeable ones go to `added`.
  void grow(StageSums& s, int j, std::vector<KnapsackItem>* added) const {
    s.addNode(p, j);
    for (int x : entrants[j]) {
      KnapsackItem it;
      if (p.storages[x].producer >= s.first && s.addStorage(p, x, &it) && added) added->push_back(it);
    }
    s.closeNode();
  }
  // Stage k can never fit again, however it grows.
  bool neverFits(const StageSums& s, int f) const {
    return p.budgetBytes > 0 && unitsFor(s.monotoneExcess(p, f), f, unit) > s.freeableAll;
  }
};

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

// Whether stage k of [s.first, end) fits with some choice: the knapsacks'
// feasibility without the knapsacks. A variant fits when freeing everything
// it may free covers its need; StageKnapsacks::best is finite exactly then
// (its capacity is the stage's reach, which holds every end the DP tries).
bool stageCanFit(const Problem& p, const StageSums& s, int k, int end) {
  if (p.budgetBytes <= 0 || s.need(p, k, end, Variant::Keep) == 0) return true;
  const int64_t needRecompute = s.need(p, k, end, Variant::Recompute);
  if (needRecompute <= s.freeableRecompute) return true;
  if (p.swapSecondsPerByte <= 0) return false;
  return s.need(p, k, end, Variant::Swap) <= s.freeableSwap || s.need(p, k, end, Variant::Both) <= s.freeableAll;
}

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

// The DP with stages pruned above `upper` (see balancedUpperBound): finds the
// optimum whenever the optimum's step time is at most `upper`.
bool optimalCutsBelow(const Problem& p, double upper, std::vector<int>* cutsOut, double* best) {
  const int n = p.numNodes(), stages = p.stages;
  const Context ctx(p);
  std::vector<std::vector<std::vector<Point>>> fronts(stages, std::vector<std::vector<Point>>(n + 1));
  const std::vector<Point> origin{{0, 0, -1, -1}};
  std::vector<Point> extended, scratch;
  std::vector<KnapsackItem> added;
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

// Whether some split fits the budget: optimalCuts' DP over (stage, end)
// with each stage's knapsacks replaced by stageCanFit, so true exactly when
// optimalCuts finds a plan, at a fraction of its cost (minimalBudget's
// search asks this some 30 times).
bool anySplitFits(const Problem& p) {
  const int n = p.numNodes(), stages = p.stages;
  const Context ctx(p);
  std::vector<std::vector<char>> reached(stages, std::vector<char>(n + 1, 0));
  std::vector<int> active;
  for (int i = 0; i < n; ++i) {
    active.clear();
    if (i == 0) active.push_back(0);
    if (i > 0 && p.validCut[i]) {
      for (int k = 1; k < stages; ++k) {
        if (reached[k - 1][i]) active.push_back(k);
      }
    }
    auto sums = ctx.sums(i);
    for (int j = i + 1; j <= n && !active.empty(); ++j) {
      ctx.grow(sums, j - 1, nullptr);
      for (size_t a = 0; a < active.size();) {
        const int k = active[a];
        if (ctx.neverFits(sums, holdingFactor(p, k, sums.first))) {
          active.erase(active.begin() + static_cast<long>(a));
          continue;
        }
        ++a;
        if (canEnd(p, k, j) && !reached[k][j] && stageCanFit(p, sums, k, j)) reached[k][j] = 1;
      }
    }
  }
  return reached[stages - 1][n] != 0;
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

}  // namespace

bool stageFits(const Problem& p, int stage, int first, int end) {
  const Context ctx(p);
  auto sums = ctx.sums(first);
  for (int j = first; j < end; ++j) ctx.grow(sums, j, nullptr);
  return stageCanFit(p, sums, stage, end);
}

int64_t smallestFittingBudget(int64_t below, int64_t unit, const std::function<bool(int64_t)>& fits) {
  constexpr int64_t inf = std::numeric_limits<int64_t>::max();
  int64_t lo = std::max<int64_t>(0, below);
  int64_t hi = lo + 1, step = std::max<int64_t>({1, unit, hi / 256});
  for (int tries = 0; !fits(hi); ++tries, step *= 2) {
    if (tries == 62 || hi > inf / 4) return -1;
    lo = hi;
    hi += step;
  }
  while (hi - lo > std::max<int64_t>(1, hi >> 16)) {  // to 1/65536 of the budget
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

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
    if (need <= sums.freeableRecompute) {
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
  }
  const double hide = std::max(sums.compute, maxReach(ctx, first).compute);
  for (Variant v : {Variant::Swap, Variant::Both}) {
    if (p.swapSecondsPerByte <= 0) break;
    const int64_t need = sums.need(p, stage, end, v);
    if (need <= sums.freeable(v)) {
      FrontKnapsack knap(hide, /*record=*/true, /*swapOnly=*/v == Variant::Swap);
      knap.reset(need);
      for (auto& it : items) knap.add(it);
      int point = -1;
      const double seconds = knap.best(need, sums.compute, &point);
      if (seconds < bestCost) {
        bestCost = seconds;
        bestFreed.clear();
        auto choice = knap.choices(need, point);
        for (size_t x = 0; x < items.size(); ++x) {
          if (choice[x]) bestFreed.emplace_back(items[x].storage, choice[x] == 1 ? Action::Recompute : Action::Swap);
        }
      }
    }
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

int64_t minimalBudget(const Problem& p) {
  // A lower bound first: min over splits of the largest stage memory with
  // every freeable storage freed (unit rounding, window and chains ignored).
  const int n = p.numNodes(), stages = p.stages;
  Problem q = p;  // budget 0: excess() is the memory itself
  q.budgetBytes = 0;
  const Context ctx(q);
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> dp(stages, std::vector<int64_t>(n + 1, inf));
  for (int i = 0; i < n; ++i) {
    if (i > 0 && !p.validCut[i]) continue;
    auto sums = ctx.sums(i);
    int64_t stuck = 0;
    for (int j = i + 1; j <= n; ++j) {
      for (int x : ctx.entrants[j - 1]) {
        const auto& st = p.storages[x];
        if (st.producer < i) continue;
        if (p.swapSecondsPerByte <= 0 && recomputeSeconds(p, x, i) == kInf) stuck += st.bytes;
      }
      ctx.grow(sums, j - 1, nullptr);
      for (int k = (i == 0 ? 0 : 1); k < stages; ++k) {
        if (!canEnd(p, k, j)) continue;
        if (k > 0 && dp[k - 1][i] == inf) continue;
        if (k == 0 && i != 0) continue;
        // No window, and swapped storages W reads out of the split backward's
        // holding (Note [swapped weight reads]): a lower bound.
        const int64_t pending = i > 0 && !q.weightPendingPerStage.empty() ? q.weightPendingPerStage[k] : 0;
        const int64_t mem = sums.excess(q, k, j, Variant::Swap, stuck) - q.window() - pending * sums.weightSwappable;
        dp[k][j] = std::min(dp[k][j], std::max(k == 0 ? 0 : dp[k - 1][i], mem));
      }
    }
  }
  if (dp[stages - 1][n] == inf) return -1;
  // Then the exact (unit-rounded) model, whose feasibility is monotone in
  // the budget (Note [memory unit], CostModel.h).
  q = p;
  q.unitBytes = memoryUnit(p);
  return smallestFittingBudget(std::max<int64_t>(1, dp[stages - 1][n]) - 1, q.unitBytes, [&](int64_t budget) {
    q.budgetBytes = budget;
    return anySplitFits(q);
  });
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
