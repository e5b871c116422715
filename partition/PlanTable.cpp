#include "partition/Plan.h"

#include <cstdio>
#include <sstream>

#include "core/Bytes.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice::partition {

// Which rank hosts which stage, in words (several stages per rank).
std::string Plan::placementText() const {
  const int ranks = static_cast<int>(stages.size()) / std::max(1, chunks);
  const auto* kind = pipeline::findScheduleKind(schedule);
  return pipeline::Placement{ranks, chunks, kind && kind->vShape}.describe();
}

// Several stages per rank: each rank's peak, its stages together (Note [rank budget], Plan.cpp).
std::string Plan::rankPeaksText() const {
  if (chunks <= 1 || stages.empty() || stages.front().rankPeakBytes <= 0) return "";
  std::ostringstream os;
  const int ranks = static_cast<int>(stages.size()) / chunks;
  const auto* kind = pipeline::findScheduleKind(schedule);
  const pipeline::Placement placement{ranks, chunks, kind && kind->vShape};
  for (int r = 0; r < ranks; ++r) {
    std::string list;
    for (int k : placement.stagesOf(r)) list += (list.empty() ? "" : ", ") + std::to_string(k);
    os << "  rank " << r << " (stages " << list << "): predicted peak "
       << formatBytes(stages.at(placement.stagesOf(r).front()).rankPeakBytes)
       << (budgetBytes > 0 ? " of its " + formatBytes(budgetBytes) + " budget" : std::string()) << "\n";
  }
  return os.str();
}

std::string Plan::table() const {
  std::ostringstream os;
  char buf[400];
  auto mib = [](int64_t b) { return formatBytes(b); };
  std::snprintf(buf, sizeof(buf),
                "plan for graph %s: method %s, memory policy %s, %s, %d micro-batches of %d, data parallel %d, budget %s\n",
                graphHash.c_str(), partitionMethodName(method), choiceName(memory::memoryPolicies(), policy),
                (schedule + (scheduleCosts() ? " fitted to the stage times" : "") +
                 (chunks > 1 ? " (" + std::to_string(chunks) + " stages per rank, " + placementText() + ")" : "")).c_str(),
                microBatches, microBatchSize, dataParallel,
                budgetBytes > 0 ? (mib(budgetBytes) + (chunks > 1 ? " per rank, its stages together" : " per stage")).c_str()
                                : "none");
  os << buf;
  std::snprintf(buf, sizeof(buf), "%5s %14s %10s %8s %8s %8s %8s %8s  %-23s %10s %10s\n", "stage", "nodes", "params",
                "fwd ms", "bwd ms", "comm ms", "extra ms", "time ms", "peak memory / budget", "swapped", "recomputed");
  os << buf;
  for (auto& s : stages) {
    const std::string range = "[" + std::to_string(s.firstNode) + ", " + std::to_string(s.endNode) + ")";
    const std::string memory =
        mib(s.peakBytes) + " / " + (budgetBytes > 0 && chunks <= 1 ? mib(budgetBytes) : std::string("-"));
    std::snprintf(buf, sizeof(buf), "%5d %14s %10s %8.2f %8.2f %8.2f %8.2f %8.2f  %-23s %10s %10s\n", s.index,
                  range.c_str(), mib(s.paramBytes).c_str(), 1e3 * s.forward, 1e3 * s.backward, 1e3 * s.comm,
                  1e3 * (s.swap + s.recompute + s.loss + s.refill), 1e3 * s.time, memory.c_str(), mib(s.swappedBytes).c_str(),
                  mib(s.recomputedBytes).c_str());
    os << buf;
  }
  std::snprintf(buf, sizeof(buf),
                "predicted step time %.2f ms (bubble %.1f%%); extra = loss + swap stall + recompute + refill after waits\n"
                "peak memory = static (parameters, gradients, optimizer state) + in flight x held (boundary + kept "
                "activations) + transient (+ swap window)\n",
                1e3 * stepTime, 100 * bubbleFraction);
  os << buf;
  if (refillWaitSeconds > 0) {
    os << "refill after waits (an action that follows a wait of w runs longer by its share of its time x min(1, w / "
       << static_cast<int>(std::lround(1e3 * refillWaitSeconds)) << " ms)), per micro-batch:";
    for (auto& s : stages) {
      std::snprintf(buf, sizeof(buf), " stage %d %.2f ms (share %.1f%%);", s.index, 1e3 * s.refill,
                    100 * s.refillShare);
      os << buf;
    }
    os << "\n";
  }
  if (!opLevelCuts.empty()) {
    std::string list;
    for (int c : opLevelCuts) list += (list.empty() ? "" : ", ") + std::to_string(c);
    std::snprintf(buf, sizeof(buf),
                  "cuts on layer boundaries: the best cuts between ops, [%s], were predicted %.2f ms (%.1f%% faster), "
                  "less than pipeline.partition.min_op_level_gain (%.1f%%)\n",
                  list.c_str(), 1e3 * opLevelStepTime, 100 * (1 - opLevelStepTime / stepTime), 100 * minOpLevelGain);
    os << buf;
  }
  for (auto& s : stages) {
    // Split backward: what the peak holds besides (gradients waiting for their W, CostModel.h).
    const int64_t pendingW =
        s.peakBytes - s.staticBytes - s.inFlight * s.heldBytes - s.transientBytes - s.windowBytes;
    std::snprintf(buf, sizeof(buf), "  stage %d memory: %s static + %d x %s held (%s boundary, %s kept) + %s transient%s%s\n",
                  s.index, mib(s.staticBytes).c_str(), s.inFlight, mib(s.heldBytes).c_str(), mib(s.boundaryBytes).c_str(),
                  mib(s.keptBytes).c_str(), mib(s.transientBytes).c_str(),
                  pendingW > 0 ? (" + " + mib(pendingW) + " held between Bi and W (what W reads, its gradients)").c_str() : "",
                  s.windowBytes > 0 ? (" + " + mib(s.windowBytes) + " swap window").c_str() : "");
    os << buf;
  }
  os << rankPeaksText();
  if (!decisions.empty()) {
    os << decisions.size() << " saved storages are not kept:\n";
    for (auto& d : decisions) {
      std::snprintf(buf, sizeof(buf), "  stage %d node %5d.%d %-24s %10s %s%s\n", d.stage, d.node, d.slot, d.op.c_str(),
                    mib(d.bytes).c_str(), actionName(d.action),
                    d.action == Action::Recompute ? (" (re-runs " + std::to_string(d.segment.size()) + " nodes)").c_str()
                                                  : "");
      os << buf;
    }
  }
  return os.str();
}

}  // namespace sluice::partition
