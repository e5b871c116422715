#include "partition/PlanBuild.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "core/Bytes.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "partition/Refill.h"
#include "partition/Segments.h"
#include "pipeline/Schedule.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice::partition {

pipeline::Schedule scheduleFor(const PlanSettings& st, const std::optional<pipeline::ScheduleCosts>& costs) {
  return pipeline::makeSchedule(st.schedule.kind(), st.stages, st.microBatches, st.chunks, costs ? &*costs : nullptr);
}


namespace {

// Parameters read by several nodes (tied weights): counted on every stage that reads them.
std::vector<SharedParam> sharedParams(const OpGraph& graph) {
  std::vector<SharedParam> out;
  std::map<std::string, std::vector<int>> readers;
  for (auto& node : graph.nodes()) {
    for (auto& name : node.params) {
      auto& r = readers[name];
      if (r.empty() || r.back() != node.index) r.push_back(node.index);
    }
  }
  for (auto& in : graph.inputs()) {
    auto it = readers.find(in.name);
    if (in.kind != InputKind::Data && it != readers.end() && it->second.size() > 1) {
      out.push_back({in.value.bytes(), it->second, in.kind == InputKind::Parameter});
    }
  }
  return out;
}

// Per node prefix sums of the gradients a split backward's Bi captures for
// W (CostModel.h, Problem::weightGradPrefix).
std::vector<int64_t> weightGradPrefix(const OpGraph& graph, const Profile& profile) {
  const int n = graph.numNodes();
  // Nodes whose backward feeds activations and weights (a strict, non-zero
  // weight share): the deferred W re-enters them with their output's gradient.
  // A captured gradient that is one tensor counts once: an in-place op's
  // result is its first input's storage, and the gradient an in-place add
  // passes back is the very tensor it received (a linear layer's matmul
  // and bias add_); a node whose outputs need no gradient captures none.
  std::unordered_map<std::string, int> producerOf;
  for (auto& node : graph.nodes()) {
    for (auto& v : node.outputs) producerOf[v.name] = node.index;
  }
  std::vector<char> mixed(n, 0);
  std::vector<int64_t> prefix(n + 1, 0);
  for (int j = 0; j < n; ++j) {
    const auto& node = profile.nodes[j];
    const auto& op = graph.nodes()[j];
    mixed[j] = node.weightBackwardSeconds > 0 && node.weightBackwardSeconds < node.backwardSeconds &&
               std::any_of(op.outputs.begin(), op.outputs.end(), [](const ValueInfo& v) { return v.requiresGrad; });
    bool alias = false;
    if (mixed[j] && !op.op.empty() && op.op.back() == '_' && !op.inputs.empty()) {
      auto from = producerOf.find(op.inputs.front());
      alias = from != producerOf.end() && mixed[from->second];
    }
    prefix[j + 1] = prefix[j] + (mixed[j] && !alias ? node.outputBytes : 0);
  }
  return prefix;
}

// What the schedule holds per stage (in flight; under a split backward also
// between Bi and W), Note [split backward holding] (CostModel.h).
void setScheduleHoldings(Problem& p, const OpGraph& graph, const Profile& profile, const PlanSettings& st) {
  const pipeline::ScheduleKind* kind = nullptr;
  try {
    kind = &st.schedule.kind();
  } catch (const ScheduleError& e) {
    throw PlanError(std::string("partition: ") + e.what());
  }
  p.gpipe = kind->holdsEveryMicroBatch;
  const auto schedule = scheduleFor(st);
  const bool split = pipeline::splitsBackward(schedule);
  // Schedules other than GPipe and 1F1B: in flight per stage from the schedule itself.
  const bool ownFlights = split || schedule.chunks() > 1;
  if (ownFlights) p.inFlightPerStage = split ? pipeline::peakAwaitingBackward(schedule) : pipeline::peakInFlight(schedule);
  if (split) {
    // Note [split backward holding] (CostModel.h). (Stage 0 holds its output
    // gradients instead: Problem::weightGradPerMicroBatch.)
    p.weightPendingPerStage = pipeline::peakWeightPending(schedule);
    p.holdingMixes = pipeline::holdingMixes(schedule);
    for (auto& storage : p.storages) {
      storage.weightReads = std::any_of(storage.savers.begin(), storage.savers.end(),
                                        [&](int j) { return profile.nodes[j].weightBackwardSeconds > 0; });
    }
    p.weightGradPrefix = weightGradPrefix(graph, profile);
  }
}

// Where the graph may be cut (both ends always) and the bytes live across
// each cut; at node 0, the data.
void setCuts(Problem& p, const OpGraph& graph) {
  const int n = graph.numNodes();
  p.cutBytes.assign(n + 1, 0);
  p.validCut.assign(n + 1, 0);
  p.validCut[0] = p.validCut[n] = 1;
  for (auto& in : graph.inputs()) {
    if (in.kind == InputKind::Data) p.cutBytes[0] += in.value.bytes();
  }
  for (int c : graph.validCuts()) {
    p.validCut[c] = 1;
    for (auto& v : graph.liveAcross(c)) p.cutBytes[c] += v.bytes();
  }
}

// The swap tier's costs (none unless swapping is on and both bandwidths were
// measured) and its window.
void setSwapTier(Problem& p, const MachineProfile& m, const PlanSettings& st) {
  p.swapSecondsPerByte = st.swap && m.swapWriteBandwidth > 0 && m.swapReadBandwidth > 0
                             ? 1.0 / m.swapWriteBandwidth + 1.0 / m.swapReadBandwidth
                             : 0.0;
  p.swapCpuSecondsPerByte = p.swapSecondsPerByte > 0 ? m.swapCpuSecondsPerByte : 0.0;
  p.swapWindowBytes = st.swapWindowBytes;
  p.swapWindowShare = st.swapWindowShare;
  if (p.swapWindowBytes == 0 && (p.swapWindowShare == 0 || st.budgetBytes == 0)) p.swapWindowBytes = 64ll << 20;
}

// A memory policy other than plan: what the partitioner may no longer free
// (under `none`, a parameter writer at n, the graph's end, bars every recompute).
void applyMemoryPolicy(Problem& p, memory::MemoryPolicy policy, int n) {
  if (policy != memory::MemoryPolicy::Plan) {
    // Nothing is left for the partitioner to free: `none` keeps everything and
    // full_recompute's choices are fixed (fullRecomputeChoices).
    p.swapSecondsPerByte = 0;
    if (policy == memory::MemoryPolicy::None) {
      for (auto& s : p.storages) s.lastParamWriter = n;
    }
  }
}

}  // namespace

Problem makeProblem(const OpGraph& graph, const Profile& profile, const PlanSettings& st) {
  SLUICE_CHECK(profile.graphHash == graph.hash() && static_cast<int>(profile.nodes.size()) == graph.numNodes(),
               PlanError, "the profile was made for another graph (hash " << profile.graphHash << ", this config "
                                                                          << "captures " << graph.hash() << ")");
  Problem p;
  const int n = graph.numNodes();
  for (auto& node : profile.nodes) {
    p.nodes.push_back({node.forwardSeconds, node.backwardSeconds, node.paramBytes, node.workspaceBytes,
                       node.forwardWorkspaceBytes});
  }
  p.sharedParams = sharedParams(graph);
  p.storages = savedStorages(graph, profile.facts);
  setCuts(p, graph);
  p.lossSeconds = profile.lossForwardSeconds + profile.lossBackwardSeconds;
  p.lossSavedBytes = profile.lossSavedBytes;
  p.lossWorkspace = profile.lossWorkspaceBytes;
  p.dataBytes = profile.dataBytes;
  p.p2pBandwidth = profile.machine.p2pBandwidth;
  p.p2pLatency = profile.machine.p2pLatency;
  setSwapTier(p, profile.machine, st);
  SLUICE_CHECK(st.chunks >= 1, PlanError, "partition: chunks per rank must be >= 1, got " << st.chunks);
  p.stages = st.stages * st.chunks;
  p.microBatches = st.microBatches;
  setScheduleHoldings(p, graph, profile, st);
  // A rank holds its chunks' stages at once: each gets an equal share of the budget.
  p.budgetBytes = st.budgetBytes / st.chunks;
  p.budgetShares = st.chunks;
  // Weights + gradients + Adam's two moments (sharded over data parallel by DistAdam).
  p.staticPerParamByte = 2.0 + (st.distAdam ? 2.0 / std::max(1, st.dataParallel) : 2.0);
  if (st.distAdam && st.dataParallel > 1) {
    p.stepRanks = st.dataParallel;
    p.stepBucketBytes = st.distAdamBucketBytes;
  }
  applyMemoryPolicy(p, st.policy, n);
  p.unitBytes = memoryUnit(p);  // fixed once (Note [memory unit])
  p.validate();
  return p;
}

// full_recompute: every saved storage made inside a transformer block and not
// read after it (the block's output is the checkpoint) is recomputed.
std::vector<std::pair<int, Action>> fullRecomputeChoices(const OpGraph& graph, const Profile& profile,
                                                         const Problem& p, int first, int end) {
  const auto block = blockOfNodes(graph);
  std::map<int, std::pair<int, int>> range;  // block -> [first node, end node)
  for (int j = 0; j < graph.numNodes(); ++j) {
    if (block[j] < 0) continue;
    auto it = range.find(block[j]);
    if (it == range.end()) range[block[j]] = {j, j + 1};
    else it->second.second = j + 1;
  }
  SLUICE_CHECK(!range.empty(), PlanError,
               "memory.policy full_recompute checkpoints transformer blocks (numbered module paths like h.3.), and this "
               "model has none; use memory.policy plan");
  // A block runs from its first node to the next block's first node; the last
  // one also takes the parameter-free nodes after it (its residual add).
  std::vector<std::pair<int, int>> regions;
  for (auto it = range.begin(); it != range.end(); ++it) {
    auto next = std::next(it);
    int e = next != range.end() ? next->second.first : it->second.second;
    if (next == range.end()) {
      while (e < graph.numNodes() && graph.nodes()[e].params.empty()) ++e;
    }
    regions.push_back({it->second.first, e});
  }
  std::vector<std::pair<int, Action>> freed;
  for (int x = 0; x < static_cast<int>(p.storages.size()); ++x) {
    const auto& st = p.storages[x];
    if (!storageInStage(p, x, first, end)) continue;
    for (auto [a, e] : regions) {
      if (st.producer < a || st.producer >= e) continue;
      if (st.lastReader >= e) break;  // leaves the block: the checkpoint
      if (recomputeSeconds(p, x, first) == std::numeric_limits<double>::infinity()) break;
      freed.emplace_back(x, Action::Recompute);
      break;
    }
  }
  return freed;
}

}  // namespace sluice::partition
