#include "partition/CostModel.h"

#include <algorithm>
#include <limits>

#include "core/Error.h"

namespace sluice::partition {

const char* actionName(Action a) {
  switch (a) {
    case Action::Keep: return "keep";
    case Action::Swap: return "swap";
    case Action::Recompute: return "recompute";
  }
  return "?";
}

void Problem::validate() const {
  const size_t n = nodes.size();
  SLUICE_CHECK(n >= 1, PlanError, "partition: the profile has no nodes");
  SLUICE_CHECK(cutBytes.size() == n + 1 && validCut.size() == n + 1, PlanError,
               "partition: " << n << " nodes need " << n + 1 << " cut entries, got " << cutBytes.size() << " and "
                             << validCut.size());
  SLUICE_CHECK(stages >= 1 && microBatches >= 1, PlanError, "partition: stages and micro-batches must be >= 1");
  SLUICE_CHECK(budgetBytes >= 0 && staticPerParamByte >= 0 && swapSecondsPerByte >= 0 && p2pBandwidth >= 0,
               PlanError, "partition: negative budget, bandwidth or memory factor");
  for (size_t j = 0; j < n; ++j) {
    const auto& c = nodes[j];
    SLUICE_CHECK(c.forward >= 0 && c.backward >= 0 && c.saved >= 0 && c.params >= 0, PlanError,
                 "partition: node " << j << " has a negative time or size");
  }
}

int inFlight(const Problem& p, int stage) { return p.gpipe ? p.microBatches : std::min(p.stages - stage, p.microBatches); }

int64_t memoryUnit(const Problem& p) { return std::max<int64_t>(1, p.budgetBytes / 1024); }

double commSeconds(const Problem& p, int cut) {
  if (cut <= 0 || cut >= p.numNodes() || p.p2pBandwidth <= 0) return 0;
  return 2 * (p.p2pLatency + static_cast<double>(p.cutBytes[cut]) / p.p2pBandwidth);
}

Action cheapestFree(const Problem& p, int node, double* seconds) {
  const auto& c = p.nodes[node];
  if (c.saved / memoryUnit(p) <= 0) return Action::Keep;
  const double inf = std::numeric_limits<double>::infinity();
  const double recompute = c.recomputable ? c.forward : inf;
  const double swap = p.swapSecondsPerByte > 0 ? p.swapSecondsPerByte * static_cast<double>(c.saved) : inf;
  if (recompute == inf && swap == inf) return Action::Keep;
  *seconds = std::min(recompute, swap);
  return recompute <= swap ? Action::Recompute : Action::Swap;  // ties: recompute (no I/O)
}

StageCost evaluateStage(const Problem& p, int stage, int first, int end,
                        const std::vector<std::pair<int, Action>>& freed) {
  SLUICE_CHECK(0 <= first && first < end && end <= p.numNodes(), PlanError,
               "partition: bad node range [" << first << ", " << end << ")");
  StageCost s;
  s.stage = stage;
  s.first = first;
  s.end = end;
  s.inFlight = inFlight(p, stage);
  for (int j = first; j < end; ++j) {
    s.forward += p.nodes[j].forward;
    s.backward += p.nodes[j].backward;
    s.paramBytes += p.nodes[j].params;
    s.savedBytes += p.nodes[j].saved;
  }
  const int64_t unit = memoryUnit(p);
  int64_t freedUnits = 0;
  for (auto [j, action] : freed) {
    SLUICE_CHECK(first <= j && j < end, PlanError, "partition: node " << j << " is not in stage " << stage);
    const auto& c = p.nodes[j];
    if (action == Action::Swap) {
      SLUICE_CHECK(p.swapSecondsPerByte > 0, PlanError, "partition: swap needs a swap tier");
      s.swap += p.swapSecondsPerByte * static_cast<double>(c.saved);
      s.swappedBytes += c.saved;
    } else if (action == Action::Recompute) {
      SLUICE_CHECK(c.recomputable, PlanError, "partition: node " << j << " cannot be recomputed");
      s.recompute += c.forward;
      s.recomputedBytes += c.saved;
    } else {
      continue;
    }
    freedUnits += c.saved / unit;
    s.freed.emplace_back(j, action);
  }
  s.keptBytes = s.savedBytes - s.swappedBytes - s.recomputedBytes;
  s.staticBytes = static_cast<int64_t>(static_cast<double>(s.paramBytes) * p.staticPerParamByte);
  s.peakBytes = s.staticBytes + s.inFlight * s.keptBytes;
  s.comm = commSeconds(p, first) + commSeconds(p, end);
  if (end == p.numNodes()) s.loss = p.lossSeconds;
  s.time = s.forward + s.backward + s.swap + s.recompute + s.comm + s.loss;
  if (p.budgetBytes <= 0) {
    s.fits = true;
  } else if (s.staticBytes > p.budgetBytes) {
    s.fits = false;
  } else {
    const int64_t excess = s.staticBytes + s.inFlight * s.savedBytes - p.budgetBytes;
    if (excess <= 0) {
      s.fits = true;
    } else {
      const int64_t perMicroBatch = (excess + s.inFlight - 1) / s.inFlight;
      s.fits = freedUnits >= (perMicroBatch + unit - 1) / unit;
    }
  }
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
