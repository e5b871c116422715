// partition/StageSums.h (internal to the partitioner: Partitioner.cpp,
// Feasibility.cpp): what a stage [first, end) holds and needs, accumulated
// one node at a time as the DP grows a stage, the three ways it may free
// memory (Note [freeing variants]), and whether it can fit at all
// (stageCanFit) without solving its knapsacks. Pure; thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "partition/CostModel.h"
#include "partition/Knapsack.h"

namespace sluice::partition::detail {

constexpr double kInf = std::numeric_limits<double>::infinity();

inline int64_t unitsFor(int64_t excess, int inFlight, int64_t unit) {
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
    const int64_t transient = std::max(nodes, last ? p.lossWorkspace : 0) + stageBuffers(p, first, end);
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
    return staticBytes(p) + f * (boundary + saved) + plain.workspace + inputBuffers(p, first) - p.budgetBytes;
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
inline std::vector<std::vector<int>> storagesByFirstSaver(const Problem& p) {
  std::vector<std::vector<int>> out(p.numNodes());
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) out[p.storages[x].firstSaver].push_back(x);
  return out;
}

inline std::vector<int> lastReaders(const Problem& p) {
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
// Whether stage k of [s.first, end) fits with some choice: the knapsacks'
// feasibility without the knapsacks. A variant fits when freeing everything
// it may free covers its need; StageKnapsacks::best is finite exactly then
// (its capacity is the stage's reach, which holds every end the DP tries).
inline bool stageCanFit(const Problem& p, const StageSums& s, int k, int end) {
  if (p.budgetBytes <= 0 || s.need(p, k, end, Variant::Keep) == 0) return true;
  const int64_t needRecompute = s.need(p, k, end, Variant::Recompute);
  if (needRecompute <= s.freeableRecompute) return true;
  if (p.swapSecondsPerByte <= 0) return false;
  return s.need(p, k, end, Variant::Swap) <= s.freeableSwap || s.need(p, k, end, Variant::Both) <= s.freeableAll;
}

// Whether stage k may end at node j (the last stage ends at the graph's end,
// the others at a valid cut leaving a node for each later stage).
inline bool canEnd(const Problem& p, int k, int j) {
  const int n = p.numNodes(), last = p.stages - 1;
  if (k == last) return j == n;
  return j < n && p.validCut[j] && j <= n - (last - k);
}

// Whether some split fits the budget (Feasibility.cpp).
bool anySplitFits(const Problem& p);

}  // namespace sluice::partition::detail
