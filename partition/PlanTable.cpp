#include "partition/Plan.h"

#include <cstdio>
#include <sstream>

#include "core/Bytes.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice::partition {

// Which rank hosts which stage, in words (several stages per rank).
std::string Plan::placementText() const {
  const int ranks = static_cast<int>(stages.size()) / std::max(1, chunks);
  return pipeline::placementOf(*schedule, ranks, chunks).describe();
}

// Several stages per rank: each rank's peak, its stages together (Note [rank budget], Plan.cpp).
std::string Plan::rankPeaksText() const {
  if (chunks <= 1 || stages.empty() || stages.front().rankPeakBytes <= 0) return "";
  std::ostringstream os;
  const int ranks = static_cast<int>(stages.size()) / chunks;
  const auto placement = pipeline::placementOf(*schedule, ranks, chunks);
  for (int r = 0; r < ranks; ++r) {
    std::string list;
    for (int k : placement.stagesOf(r)) list += (list.empty() ? "" : ", ") + std::to_string(k);
    os << "  rank " << r << " (stages " << list << "): predicted peak "
       << formatBytes(stages.at(placement.stagesOf(r).front()).rankPeakBytes)
       << (budgetBytes > 0 ? " of its " + formatBytes(budgetBytes) + " budget" : std::string()) << "\n";
  }
  return os.str();
}

namespace {

std::string mib(int64_t b) { return formatBytes(b); }

// The first line: what the plan is for and what it was made under.
void writeTitle(const Plan& plan, std::ostringstream& os) {
  char buf[400];
  const std::string schedule =
      plan.schedule->name + (plan.scheduleCosts() ? " fitted to the stage times" : "") +
      (plan.chunks > 1 ? " (" + std::to_string(plan.chunks) + " stages per rank, " + plan.placementText() + ")" : "");
  const std::string budget =
      plan.budgetBytes > 0 ? mib(plan.budgetBytes) + (plan.chunks > 1 ? " per rank, its stages together" : " per stage")
                           : "none";
  std::snprintf(buf, sizeof(buf),
                "plan for graph %s: method %s, memory policy %s, %s, %d micro-batches of %d, data parallel %d, budget %s\n",
                plan.graphHash.c_str(), partitionMethodName(plan.method),
                choiceName(memory::memoryPolicies(), plan.policy), schedule.c_str(), plan.microBatches,
                plan.microBatchSize, plan.dataParallel, budget.c_str());
  os << buf;
}

// The stage table: its column heads, then one row per stage.
void writeStageRows(const Plan& plan, std::ostringstream& os) {
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%5s %14s %10s %8s %8s %8s %8s %8s  %-23s %10s %10s\n", "stage", "nodes", "params",
                "fwd ms", "bwd ms", "comm ms", "extra ms", "time ms", "peak memory / budget", "swapped", "recomputed");
  os << buf;
  for (auto& s : plan.stages) {
    const std::string range = "[" + std::to_string(s.firstNode) + ", " + std::to_string(s.endNode) + ")";
    const std::string memory = mib(s.peakBytes) + " / " +
                               (plan.budgetBytes > 0 && plan.chunks <= 1 ? mib(plan.budgetBytes) : std::string("-"));
    std::snprintf(buf, sizeof(buf), "%5d %14s %10s %8.2f %8.2f %8.2f %8.2f %8.2f  %-23s %10s %10s\n", s.index,
                  range.c_str(), mib(s.paramBytes).c_str(), 1e3 * s.forward, 1e3 * s.backward, 1e3 * s.comm,
                  1e3 * (s.swap + s.recompute + s.loss + s.refill), 1e3 * s.time, memory.c_str(), mib(s.swappedBytes).c_str(),
                  mib(s.recomputedBytes).c_str());
    os << buf;
  }
}

// Under the table: the predicted step and what its columns mean, the refill
// after waits (when measured) and the op-level cuts passed over (if any).
void writeStepNotes(const Plan& plan, std::ostringstream& os) {
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "predicted step time %.2f ms (bubble %.1f%%); extra = loss + swap stall + recompute + refill after waits\n"
                "peak memory = static (parameters, gradients, optimizer state) + in flight x held (boundary + kept "
                "activations) + transient (+ swap window)\n",
                1e3 * plan.stepTime, 100 * plan.bubbleFraction);
  os << buf;
  if (plan.refillWaitSeconds > 0) {
    os << "refill after waits (an action that follows a wait of w runs longer by its share of its time x min(1, w / "
       << static_cast<int>(std::lround(1e3 * plan.refillWaitSeconds)) << " ms)), per micro-batch:";
    for (auto& s : plan.stages) {
      std::snprintf(buf, sizeof(buf), " stage %d %.2f ms (share %.1f%%);", s.index, 1e3 * s.refill,
                    100 * s.refillShare);
      os << buf;
    }
    os << "\n";
  }
  if (!plan.opLevelCuts.empty()) {
    std::string list;
    for (int c : plan.opLevelCuts) list += (list.empty() ? "" : ", ") + std::to_string(c);
    std::snprintf(buf, sizeof(buf),
                  "cuts on layer boundaries: the best cuts between ops, [%s], were predicted %.2f ms (%.1f%% faster), "
                  "less than pipeline.partition.min_op_level_gain (%.1f%%)\n",
                  list.c_str(), 1e3 * plan.opLevelStepTime, 100 * (1 - plan.opLevelStepTime / plan.stepTime),
                  100 * plan.minOpLevelGain);
    os << buf;
  }
}

// Each stage's peak memory in its parts.
void writeStageMemory(const Plan& plan, std::ostringstream& os) {
  char buf[400];
  for (auto& s : plan.stages) {
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
}

// The saved storages swapped or recomputed, one line each (nothing when all are kept).
void writeDecisions(const Plan& plan, std::ostringstream& os) {
  if (plan.decisions.empty()) return;
  char buf[400];
  os << plan.decisions.size() << " saved storages are not kept:\n";
  for (auto& d : plan.decisions) {
    std::snprintf(buf, sizeof(buf), "  stage %d node %5d.%d %-24s %10s %s%s\n", d.stage, d.node, d.slot, d.op.c_str(),
                  mib(d.bytes).c_str(), actionName(d.action),
                  d.action == Action::Recompute ? (" (re-runs " + std::to_string(d.segment.size()) + " nodes)").c_str()
                                                : "");
    os << buf;
  }
}

}  // namespace

std::string Plan::table() const {
  std::ostringstream os;
  writeTitle(*this, os);
  writeStageRows(*this, os);
  writeStepNotes(*this, os);
  writeStageMemory(*this, os);
  os << rankPeaksText();
  writeDecisions(*this, os);
  return os.str();
}

}  // namespace sluice::partition
