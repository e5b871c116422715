#include "partition/CostModel.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <limits>

#include "core/Error.h"

namespace sluice::partition {

void Problem::validate() const {
  const size_t n = nodes.size();
  SLUICE_CHECK(n >= 1, PlanError, "partition: the profile has no nodes");
  for (auto& sp : sharedParams) {
    SLUICE_CHECK(sp.bytes >= 0 && !sp.readers.empty() && std::is_sorted(sp.readers.begin(), sp.readers.end()) &&
                     sp.readers.front() >= 0 && sp.readers.back() < static_cast<int>(n),
                 PlanError, "partition: a shared parameter's readers are not ascending node indices");
  }
  SLUICE_CHECK(weightPendingPerStage.empty() ||
                   (static_cast<int>(weightPendingPerStage.size()) == stages && weightGradPrefix.size() == n + 1),
               PlanError, "partition: weight-pending counts or weight-gradient sums do not match the stages and nodes");
  SLUICE_CHECK(cutBytes.size() == n + 1 && validCut.size() == n + 1, PlanError,
               "partition: " << n << " nodes need " << n + 1 << " cut entries, got " << cutBytes.size() << " and "
                             << validCut.size());
  SLUICE_CHECK(stages >= 1 && microBatches >= 1, PlanError, "partition: stages and micro-batches must be >= 1");
  SLUICE_CHECK(budgetBytes >= 0 && unitBytes >= 0 && staticPerParamByte >= 0 && swapSecondsPerByte >= 0 && swapCpuSecondsPerByte >= 0 &&
                   p2pBandwidth >= 0 &&
                   swapWindowBytes >= 0 && swapWindowShare >= 0 && lossSavedBytes >= 0 && lossWorkspace >= 0 &&
                   dataBytes >= 0,
               PlanError, "partition: negative budget, bandwidth, window or memory factor");
  for (size_t j = 0; j < n; ++j) {
    const auto& c = nodes[j];
    SLUICE_CHECK(c.forward >= 0 && c.backward >= 0 && c.params >= 0 && c.workspace >= 0 && c.forwardWorkspace >= -1,
                 PlanError,
                 "partition: node " << j << " has a negative time or size");
  }
  for (size_t s = 0; s < storages.size(); ++s) {
    const auto& st = storages[s];
    SLUICE_CHECK(st.bytes >= 0 && 0 <= st.producer && st.producer <= st.firstSaver &&
                     st.firstSaver < static_cast<int>(n) && st.lastReader >= st.firstSaver && !st.segment.empty() &&
                     std::is_sorted(st.segment.begin(), st.segment.end()) && st.segment.back() <= st.firstSaver,
                 PlanError, "partition: saved storage " << s << " (node " << st.producer << ") is malformed");
    for (int x : st.inputs) {
      SLUICE_CHECK(0 <= x && x < static_cast<int>(storages.size()) && x != static_cast<int>(s), PlanError,
                   "partition: saved storage " << s << " reads storage " << x << ", which is not another storage");
    }
  }
}

int inFlight(const Problem& p, int stage) {
  if (!p.inFlightPerStage.empty()) return p.inFlightPerStage.at(stage);
  return p.gpipe ? p.microBatches : std::min(p.stages - stage, p.microBatches);
}

int holdingFactor(const Problem& p, int stage, int first) {
  const int pending = first == 0 && !p.weightPendingPerStage.empty() ? p.weightPendingPerStage.at(stage) : 0;
  return inFlight(p, stage) + pending;
}

int64_t Problem::weightGradPerMicroBatch(int first, int end) const {
  if (weightPendingPerStage.empty()) return 0;
  // The first stage's inputs (the data) need no gradient: its BackwardInput
  // captures nothing, and its W runs its whole backward from the stage's
  // output gradients, held until then.
  if (first == 0) return end < numNodes() ? cutBytes.at(end) : 0;
  return weightGradPrefix.at(end) - weightGradPrefix.at(first);
}

int64_t Problem::weightGradBytes(int stage, int first, int end) const {
  if (weightPendingPerStage.empty()) return 0;
  return weightPendingPerStage.at(stage) * weightGradPerMicroBatch(first, end);
}

int64_t Problem::weightHeldBound(int stage, int first, int end, int64_t weightSaved) const {
  if (weightPendingPerStage.empty()) return 0;
  // (The first stage's held bytes count in holdingFactor.)
  const int64_t held = first == 0 ? 0 : cutBytes.at(first) + weightSaved;
  const int64_t captured = weightGradPerMicroBatch(first, end);
  // (A finishing Bi's captured gradients, and what W reads, read back by it,
  // come on top of the max counts once.)
  return weightPendingPerStage.at(stage) * (held + captured) + captured + (first == 0 ? 0 : weightSaved);
}

int64_t Problem::stepBytes(int64_t paramBytes, int64_t largestParamBytes) const {
  if (stepRanks <= 1) return 0;
  const double d = stepRanks;
  // A parameter over the cap gets a bucket of its own (optim/FlatLayout.h).
  const int64_t bucket = std::max({stepBucketBytes, largestParamBytes, int64_t{4}});
  const int64_t gathered = std::min(paramBytes, 2 * bucket);
  return static_cast<int64_t>(static_cast<double>(paramBytes) / d + static_cast<double>(gathered) * (1 + 1 / d));
}

int64_t readerGradBytes(const std::vector<SharedParam>& shared, int first, int end) {
  int64_t out = 0;
  for (auto& sp : shared) {
    if (!sp.parameter) continue;
    const auto inStage = std::count_if(sp.readers.begin(), sp.readers.end(), [&](int r) { return r >= first && r < end; });
    if (inStage > 1) out += (inStage - 1) * sp.bytes;
  }
  return out;
}

int64_t memoryUnit(const Problem& p) {
  if (p.unitBytes > 0) return p.unitBytes;
  int64_t total = 0;
  for (auto& st : p.storages) total += st.bytes;
  return std::max<int64_t>(1, total / kMemoryUnits);
}

double commSeconds(const Problem& p, int cut) {
  if (cut <= 0 || cut >= p.numNodes() || p.p2pBandwidth <= 0) return 0;
  return 2 * (p.p2pLatency + static_cast<double>(p.cutBytes[cut]) / p.p2pBandwidth);
}

bool storageInStage(const Problem& p, int s, int first, int end) {
  const auto& st = p.storages[s];
  return first <= st.producer && st.firstSaver < end;
}

double recomputeSeconds(const Problem& p, int s, int first) {
  const auto& st = p.storages[s];
  if (st.lastParamWriter >= first) return std::numeric_limits<double>::infinity();
  double t = 0;
  for (int n : st.segment) {
    if (n >= first) t += p.nodes[n].forward;
  }
  return t;
}

// Note [stage buffers]: besides what its micro-batches hold, a stage holds
// the step's data (every rank loads its replica's), a receive buffer for its next
// input, and two gradients of its output: the one its backward consumes and
// the next one, posted while backward pieces run back to back (or, as large,
// an output whose send has not completed because the next stage was
// computing); and the runtime's scalars (loss sums, flags), kSmallBytes.
// With several stages per rank the prediction counts the posted receives
// and pending sends per action instead (Note [communication buffers],
// Prediction.cpp), without the second gradient.
// Measured on bench/memory.yaml, 2 stages under 1F1B, keeping everything or
// recomputing every block: with one gradient fewer and without the data,
// stage 0's peak was under-predicted by exactly those; with them, both peaks
// came within 100 bytes of the prediction.
int64_t inputBuffers(const Problem& p, int first) {
  constexpr int64_t kSmallBytes = 4096;
  const int64_t data = p.dataBytes > 0 ? p.microBatches * p.dataBytes : first == 0 ? p.microBatches * p.cutBytes[0] : 0;
  return kSmallBytes + data + (first == 0 ? 0 : p.cutBytes[first]);
}

int64_t stageBuffers(const Problem& p, int first, int end) {
  return inputBuffers(p, first) + (end == p.numNodes() ? 0 : 2 * p.cutBytes[end]);
}

Ratio swapHoldingRatio(const Problem& p) {
  Ratio best;
  if (p.weightPendingPerStage.empty()) return best;
  bool any = false;
  for (int k = 1; k < p.stages; ++k) {
    const int64_t f = holdingFactor(p, k, 1), num = f + p.weightPendingPerStage.at(k);
    if (!any || num * best.den < best.num * f) best = {num, f};
    any = true;
  }
  return best;
}

int64_t freedUnits(const Problem& p, int x, int first, Action action, int64_t unit, Ratio ratio) {
  const auto& st = p.storages[x];
  if (action == Action::Swap && first > 0 && st.weightReads) return st.bytes * ratio.num / ratio.den / unit;
  return st.bytes / unit;
}

bool freeable(const Problem& p, int x, int first, int64_t unit) {
  if (p.budgetBytes <= 0 || p.storages[x].bytes / unit <= 0) return false;
  return p.swapSecondsPerByte > 0 || recomputeSeconds(p, x, first) < std::numeric_limits<double>::infinity();
}

std::vector<int> spanEnds(const Problem& p, const std::vector<char>& recomputed, int first) {
  const int s = static_cast<int>(p.storages.size());
  std::vector<int> order(s), end(s), group(s);
  for (int x = 0; x < s; ++x) order[x] = x, end[x] = p.storages[x].lastReader, group[x] = x;
  // Recomputed storages whose segments share a node (inside the stage) re-run
  // together (Note [recompute groups], memory/Recompute.cpp): union-find.
  std::function<int(int)> root = [&](int x) { return group[x] == x ? x : group[x] = root(group[x]); };
  std::unordered_map<int, int> seen;  // node -> a recomputed storage whose segment has it
  for (int x = 0; x < s; ++x) {
    if (!recomputed[x]) continue;
    for (int node : p.storages[x].segment) {
      if (node < first) continue;
      auto [it, fresh] = seen.emplace(node, x);
      if (!fresh) group[root(x)] = root(it->second);
    }
  }
  // Inputs are mostly made before the storage that reads them: later
  // producers first, then again until nothing moves (a fixpoint).
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p.storages[a].producer > p.storages[b].producer; });
  for (bool changed = true; changed;) {
    changed = false;
    std::unordered_map<int, int> groupEnd;
    for (int y = 0; y < s; ++y) {
      if (recomputed[y]) groupEnd[root(y)] = std::max(groupEnd[root(y)], end[y]);
    }
    for (int y = 0; y < s; ++y) {
      if (recomputed[y] && groupEnd[root(y)] > end[y]) end[y] = groupEnd[root(y)], changed = true;
    }
    for (int y : order) {
      if (!recomputed[y]) continue;
      for (int x : p.storages[y].inputs) {
        if (end[y] > end[x]) end[x] = end[y], changed = true;
      }
    }
  }
  return end;
}

std::vector<int> spanEndsBound(const Problem& p) { return spanEnds(p, std::vector<char>(p.storages.size(), 1), 0); }

int64_t segmentWorkspace(const Problem& p, int x, int first, int end) {
  int64_t ws = 0;
  for (int n : p.storages[x].segment) {
    if (n < first || n >= end) continue;
    const auto& c = p.nodes[n];
    ws = std::max(ws, c.forwardWorkspace >= 0 ? c.forwardWorkspace : c.workspace);
  }
  return ws;
}

namespace {

// Note [replay peak]: at a trigger the recomputes rebuild their storages in
// forward order (one chain, each segment reading the storages before it:
// Note [recompute groups], memory/Recompute.cpp), each re-run node
// allocating its outputs and temporaries (NodeCost::forwardWorkspace) while
// only the storages made before it are back. Returns that peak less all of
// them, which the stage's active bytes hold at the trigger; with a node's
// forward workspace unknown, the largest workspace of the re-run nodes.
int64_t replayExcess(const Problem& p, const std::vector<int>& rebuilt, int first, int end) {
  std::map<int, int64_t> madeBy;
  std::set<int> nodes;
  int64_t total = 0, fallback = 0;
  for (int x : rebuilt) {
    const auto& st = p.storages[x];
    madeBy[st.producer] += st.bytes;
    total += st.bytes;
    fallback = std::max(fallback, segmentWorkspace(p, x, first, end));
    for (int n : st.segment) {
      if (n >= first && n < end) nodes.insert(n);
    }
  }
  int64_t before = 0, peak = 0;
  for (int n : nodes) {
    if (p.nodes[n].forwardWorkspace < 0) return fallback;
    peak = std::max(peak, before + p.nodes[n].forwardWorkspace);
    auto made = madeBy.find(n);
    if (made != madeBy.end()) before += made->second;
  }
  return std::max<int64_t>(0, peak - total);
}

}  // namespace

int64_t transientBytes(const Problem& p, int first, int end, const std::vector<char>& freed) {
  std::vector<char> recomputed(p.storages.size(), 0);
  for (size_t x = 0; x < freed.size(); ++x) recomputed[x] = freed[x] == 2;
  const auto spans = spanEnds(p, recomputed, first);
  std::vector<int64_t> keptFirstSaved(end - first, 0), active(end - first, 0), replay(end - first, 0);
  std::map<int, std::vector<int>> rebuiltAt;  // trigger -> the recomputed storages it rebuilds
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) {
    if (!storageInStage(p, x, first, end)) continue;
    const auto& st = p.storages[x];
    if (!freed[x]) {
      keptFirstSaved[st.firstSaver - first] += st.bytes;
      continue;
    }
    const int trigger = std::min(spans[x], end - 1);
    for (int j = st.firstSaver; j <= trigger; ++j) active[j - first] += st.bytes;
    if (recomputed[x]) rebuiltAt[trigger].push_back(x);
  }
  // A recompute re-runs its group at the trigger: its peak beyond what it rebuilds (Note [replay peak]).
  for (auto& [trigger, rebuilt] : rebuiltAt) replay[trigger - first] = replayExcess(p, rebuilt, first, end);
  int64_t nodes = 0, after = 0;
  for (int j = end - 1; j >= first; --j) {
    nodes = std::max(nodes, std::max(p.nodes[j].workspace, replay[j - first]) - after + active[j - first]);
    after += keptFirstSaved[j - first];
  }
  return std::max(nodes, end == p.numNodes() ? p.lossWorkspace : 0) + stageBuffers(p, first, end);
}

int64_t transientBound(const Problem& p, int first, int end, bool recomputes) {
  std::vector<int> spans;
  if (recomputes) {
    spans = spanEndsBound(p);
  } else {
    for (auto& st : p.storages) spans.push_back(st.lastReader);
  }
  std::vector<int64_t> active(end - first, 0);
  int64_t replay = 0;  // the largest workspace of a node a recompute may re-run
  const int64_t unit = memoryUnit(p);
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) {
    if (!storageInStage(p, x, first, end) || !freeable(p, x, first, unit)) continue;
    const auto& st = p.storages[x];
    for (int j = st.firstSaver; j <= std::min(spans[x], end - 1); ++j) active[j - first] += st.bytes;
    if (recomputes && recomputeSeconds(p, x, first) < std::numeric_limits<double>::infinity()) {
      replay = std::max(replay, segmentWorkspace(p, x, first, end));
    }
  }
  int64_t nodes = 0;
  for (int j = first; j < end; ++j) {
    nodes = std::max(nodes, std::max(p.nodes[j].workspace, replay) + active[j - first]);
  }
  return std::max(nodes, end == p.numNodes() ? p.lossWorkspace : 0) + stageBuffers(p, first, end);
}

namespace {

// The stage's freed storages (swapped or recomputed): their time and bytes
// on s, marked in isFreed (1: swapped, 2: recomputed). Returns the freed
// memory units.
int64_t applyFreed(const Problem& p, const std::vector<std::pair<int, Action>>& freed, std::vector<char>& isFreed,
                   StageCost& s) {
  const int stage = s.stage, first = s.first, end = s.end;
  const int64_t unit = memoryUnit(p);
  const Ratio ratio = swapHoldingRatio(p);
  int64_t units = 0;
  for (auto [x, action] : freed) {
    SLUICE_CHECK(0 <= x && x < static_cast<int>(p.storages.size()) && storageInStage(p, x, first, end), PlanError,
                 "partition: saved storage " << x << " is not in stage " << stage);
    const auto& st = p.storages[x];
    if (action == Action::Swap) {
      SLUICE_CHECK(p.swapSecondsPerByte > 0, PlanError, "partition: swap needs a swap tier");
      s.swapIO += p.swapSecondsPerByte * static_cast<double>(st.bytes);
      s.swapCpu += p.swapCpuSecondsPerByte * static_cast<double>(st.bytes);
      s.swappedBytes += st.bytes;
    } else if (action == Action::Recompute) {
      const double t = recomputeSeconds(p, x, first);
      SLUICE_CHECK(t < std::numeric_limits<double>::infinity(), PlanError,
                   "partition: saved storage " << x << " (node " << st.producer << ") cannot be recomputed in stage "
                                               << stage << ": its segment writes a parameter or buffer in place");
      s.recompute += t;
      s.recomputedBytes += st.bytes;
    } else {
      continue;
    }
    units += freedUnits(p, x, first, action, unit, ratio);
    isFreed[x] = action == Action::Recompute ? 2 : 1;
    s.freed.emplace_back(x, action);
  }
  return units;
}

// Under a split backward: what a micro-batch holds between Bi and W, what a
// finishing Bi holds on top, and the largest mix of holdings the schedule
// reaches (s.holdingBytes).
void splitBackwardHolding(const Problem& p, const std::vector<char>& isFreed, StageCost& s) {
  const int stage = s.stage, first = s.first, end = s.end;
  // Note [split backward holding] (Problem): swapped storages are back on
  // the tier between Bi and W; the first stage's W runs its whole backward.
  // A Bi reads back what W reads too (its frontier nodes unpack every saved
  // tensor): at its end the micro-batch also holds the freed ones W reads.
  int64_t weightHeld = s.boundaryBytes, weightFreed = 0;
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) {
    if (!storageInStage(p, x, first, end) || !p.storages[x].weightReads) continue;
    if (isFreed[x] != 1) weightHeld += p.storages[x].bytes;
    if (isFreed[x] != 0) weightFreed += p.storages[x].bytes;
  }
  s.heldWeightBytes = (first == 0 ? s.heldBytes : weightHeld) + p.weightGradPerMicroBatch(first, end);
  s.capturedBytes = p.weightGradPerMicroBatch(first, end) + (first == 0 ? 0 : weightFreed);
  for (auto& m : p.holdingMixes.at(stage)) {
    s.holdingBytes = std::max(s.holdingBytes, m.beforeInput * s.heldBytes + m.beforeWeight * s.heldWeightBytes +
                                                  (m.capturing ? s.capturedBytes : 0));
  }
}

// The stage's nodes' compute and parameter bytes on s, with a copy of each
// tied weight an earlier stage reads first. Returns the largest node's
// parameter bytes.
int64_t addNodeCosts(const Problem& p, StageCost& s) {
  const int first = s.first, end = s.end;
  int64_t largestParams = 0;  // a node's parameter bytes: at least its largest parameter's
  for (int j = first; j < end; ++j) {
    s.forward += p.nodes[j].forward;
    s.backward += p.nodes[j].backward;
    s.paramBytes += p.nodes[j].params;
    largestParams = std::max(largestParams, p.nodes[j].params);
  }
  // Tied weights whose first reader is on an earlier stage: this stage holds a copy.
  for (auto& sp : p.sharedParams) {
    if (sp.readers.front() >= first) continue;
    if (std::any_of(sp.readers.begin(), sp.readers.end(), [&](int r) { return r >= first && r < end; })) {
      s.paramBytes += sp.bytes;
      largestParams = std::max(largestParams, sp.bytes);
    }
  }
  return largestParams;
}

// The stage's saved bytes on s. Returns those W reads (split backward).
int64_t addSavedBytes(const Problem& p, StageCost& s) {
  int64_t weightSaved = 0;  // saved bytes W reads (split backward)
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) {
    if (!storageInStage(p, x, s.first, s.end)) continue;
    s.savedBytes += p.storages[x].bytes;
    if (p.storages[x].weightReads) weightSaved += p.storages[x].bytes;
  }
  return weightSaved;
}

// The stage's memory on s, once its freed storages are applied: what it
// keeps and holds, its peak and the bound the budget is checked against.
// Returns the stage's holding factor.
int stageMemory(const Problem& p, const std::vector<char>& isFreed, int64_t largestParams, int64_t weightSaved,
                StageCost& s) {
  const int stage = s.stage, first = s.first, end = s.end;
  s.keptBytes = s.savedBytes - s.swappedBytes - s.recomputedBytes;
  s.staticBytes = static_cast<int64_t>(static_cast<double>(s.paramBytes) * p.staticPerParamByte) +
                  readerGradBytes(p.sharedParams, first, end);
  const bool last = end == p.numNodes();
  // Note [stage memory]: stage 0's boundary is the data, resident for the
  // whole step (all micro-batches); later stages hold each in-flight
  // micro-batch's received activations until its backward.
  s.boundaryBytes = first == 0 ? 0 : p.cutBytes[first];
  s.transientBytes = transientBytes(p, first, end, isFreed);
  s.windowBytes = s.swappedBytes > 0 ? p.window() : 0;
  s.heldBytes = s.boundaryBytes + s.keptBytes + (last ? p.lossSavedBytes : 0);
  const int64_t afterBackward = s.staticBytes + p.stepBytes(s.paramBytes, largestParams);
  const int factor = holdingFactor(p, stage, first);
  int64_t holdingBound = factor * s.heldBytes;
  if (p.holdingMixes.empty()) {
    s.holdingBytes = holdingBound + p.weightGradBytes(stage, first, end);
    holdingBound = s.holdingBytes;
  } else {
    splitBackwardHolding(p, isFreed, s);
    holdingBound += p.weightHeldBound(stage, first, end, weightSaved);
  }
  s.peakBytes = std::max(afterBackward, s.staticBytes + s.holdingBytes + s.transientBytes + s.windowBytes);
  s.boundBytes = std::max(afterBackward, s.staticBytes + holdingBound +
                                             transientBound(p, first, end, s.recomputedBytes > 0) + s.windowBytes);
  return factor;
}

// Whether the stage fits the budget (always without one): keeping every
// storage fits, or the units it frees cover the excess per held micro-batch.
bool fitsBudget(const Problem& p, const StageCost& s, int factor, int64_t unitsFreed) {
  if (p.budgetBytes <= 0) return true;
  const int64_t keepAll = s.boundBytes + factor * (s.swappedBytes + s.recomputedBytes);
  const int64_t excess = keepAll - p.budgetBytes;
  if (excess <= 0) return true;
  const int64_t perMicroBatch = (excess + factor - 1) / factor;
  const int64_t unit = memoryUnit(p);
  return unitsFreed >= (perMicroBatch + unit - 1) / unit;
}

}  // namespace

StageCost evaluateStage(const Problem& p, int stage, int first, int end,
                        const std::vector<std::pair<int, Action>>& freed) {
  const int n = p.numNodes();
  SLUICE_CHECK(0 <= first && first < end && end <= n, PlanError, "partition: bad node range [" << first << ", " << end << ")");
  StageCost s;
  s.stage = stage;
  s.first = first;
  s.end = end;
  s.inFlight = inFlight(p, stage);
  const int64_t largestParams = addNodeCosts(p, s);
  const int64_t weightSaved = addSavedBytes(p, s);
  std::vector<char> isFreed(p.storages.size(), 0);  // 1: swapped, 2: recomputed
  const int64_t unitsFreed = applyFreed(p, freed, isFreed, s);
  s.swapStall = std::max(0.0, s.swapIO - (s.forward + s.backward));
  const int factor = stageMemory(p, isFreed, largestParams, weightSaved, s);
  s.comm = commSeconds(p, first) + commSeconds(p, end);
  if (end == n) s.loss = p.lossSeconds;
  s.time = s.forward + s.backward + s.swapCpu + s.swapStall + s.recompute + s.comm + s.loss;
  s.fits = fitsBudget(p, s, factor, unitsFreed);
  return s;
}

double stepTime(const std::vector<StageCost>& stages, int microBatches) {
  double sum = 0, worst = 0;
  for (auto& s : stages) {
    sum += s.time;
    worst = std::max(worst, s.time);
  }
  return sum + (microBatches - 1) * worst;
}

}  // namespace sluice::partition
