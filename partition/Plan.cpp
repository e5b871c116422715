#include "partition/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <unordered_map>

#include "core/Error.h"
#include "core/Files.h"
#include "core/GraphSplit.h"
#include "partition/Refill.h"
#include "partition/Segments.h"
#include "pipeline/Schedule.h"
#include "core/Bytes.h"
#include "sluice_plan.pb.h"

namespace sluice::partition {
namespace {

constexpr const char* kFormat = "sluice-plan-2";

Action parseAction(const std::string& s, const std::string& origin) {
  if (s == "swap") return Action::Swap;
  if (s == "recompute") return Action::Recompute;
  throw PlanError("plan " + origin + ": unknown action '" + s + "'");
}

}  // namespace

std::vector<int> Plan::cuts() const {
  std::vector<int> out;
  for (size_t k = 1; k < stages.size(); ++k) out.push_back(stages[k].firstNode);
  return out;
}

std::optional<pipeline::ScheduleCosts> Plan::scheduleCosts() const {
  pipeline::ScheduleCosts costs;
  costs.comm = scheduleComm;
  bool any = false;
  for (auto& s : stages) {
    costs.times.push_back({s.scheduleForward, s.scheduleBackwardInput + s.scheduleBackwardWeight,
                           s.scheduleBackwardInput, s.scheduleBackwardWeight});
    any = any || s.scheduleForward > 0;
  }
  if (!any) return std::nullopt;
  return costs;
}

pipeline::RefillCosts Plan::refillCosts() const {
  pipeline::RefillCosts refill;
  if (refillWaitSeconds <= 0) return refill;
  refill.waitSeconds = refillWaitSeconds;
  for (auto& s : stages) refill.share.push_back(s.refillShare);
  return refill;
}

std::string Plan::toBytes() const {
  proto::Plan p;
  p.set_format(kFormat);
  p.set_graph_hash(graphHash);
  p.set_method(method);
  p.set_schedule(schedule);
  p.set_microbatches(microBatches);
  p.set_chunks(chunks);
  p.set_micro_batch_size(microBatchSize);
  p.set_data_parallel(dataParallel);
  p.set_budget_bytes(budgetBytes);
  p.set_step_time_s(stepTime);
  p.set_bubble_fraction(bubbleFraction);
  p.set_profile_blas(profileBlas);
  p.set_profile_threads(profileThreads);
  p.set_policy(policy);
  p.set_swap_window_bytes(swapWindowBytes);
  p.set_schedule_comm_s(scheduleComm);
  for (int c : opLevelCuts) p.add_op_level_cuts(c);
  p.set_op_level_step_time_s(opLevelStepTime);
  p.set_min_op_level_gain(minOpLevelGain);
  p.set_refill_wait_s(refillWaitSeconds);
  for (auto& s : stages) {
    auto* q = p.add_stages();
    q->set_index(s.index);
    q->set_first_node(s.firstNode);
    q->set_end_node(s.endNode);
    for (auto& b : s.boundaryInputs) q->add_boundary_inputs(b);
    for (auto& b : s.params) q->add_params(b);
    q->set_param_bytes(s.paramBytes);
    q->set_in_flight(s.inFlight);
    q->set_forward_s(s.forward);
    q->set_backward_s(s.backward);
    q->set_comm_s(s.comm);
    q->set_swap_s(s.swap);
    q->set_recompute_s(s.recompute);
    q->set_loss_s(s.loss);
    q->set_time_s(s.time);
    q->set_saved_bytes(s.savedBytes);
    q->set_kept_bytes(s.keptBytes);
    q->set_swapped_bytes(s.swappedBytes);
    q->set_recomputed_bytes(s.recomputedBytes);
    q->set_static_bytes(s.staticBytes);
    q->set_peak_bytes(s.peakBytes);
    q->set_boundary_bytes(s.boundaryBytes);
    q->set_held_bytes(s.heldBytes);
    q->set_transient_bytes(s.transientBytes);
    q->set_window_bytes(s.windowBytes);
    q->set_swap_io_s(s.swapIO);
    q->set_schedule_forward_s(s.scheduleForward);
    q->set_schedule_backward_input_s(s.scheduleBackwardInput);
    q->set_schedule_backward_weight_s(s.scheduleBackwardWeight);
    q->set_refill_s(s.refill);
    q->set_refill_share(s.refillShare);
    q->set_rank_peak_bytes(s.rankPeakBytes);
  }
  for (auto& d : decisions) {
    auto* q = p.add_decisions();
    q->set_node(d.node);
    q->set_slot(d.slot);
    for (int n : d.segment) q->add_segment(n);
    q->set_stage(d.stage);
    q->set_op(d.op);
    q->set_bytes(d.bytes);
    q->set_action(actionName(d.action));
  }
  return p.SerializeAsString();
}

void Plan::save(const std::string& path) const { writeFileAtomically(path, toBytes()); }

Plan Plan::fromBytes(const std::string& bytes, const std::string& origin) {
  proto::Plan p;
  SLUICE_CHECK(p.ParseFromString(bytes) && !p.format().empty() && !p.graph_hash().empty() && p.stages_size() > 0,
               PlanError,
               "plan " << origin << " is truncated or not a Sluice plan; make it again with `sluice partition`");
  SLUICE_CHECK(p.format() == kFormat, PlanError,
               "plan " << origin << " was made by an older Sluice (format '" << p.format() << "', this one reads '"
                       << kFormat << "'): make it again with `sluice profile` and `sluice partition`");
  Plan out;
  out.graphHash = p.graph_hash();
  out.method = p.method();
  out.schedule = p.schedule();
  out.microBatches = p.microbatches();
  out.chunks = std::max(1, p.chunks());
  out.microBatchSize = p.micro_batch_size();
  out.dataParallel = p.data_parallel();
  out.budgetBytes = p.budget_bytes();
  out.stepTime = p.step_time_s();
  out.bubbleFraction = p.bubble_fraction();
  out.profileBlas = p.profile_blas();
  out.profileThreads = p.profile_threads();
  out.policy = p.policy();
  out.swapWindowBytes = p.swap_window_bytes();
  out.scheduleComm = p.schedule_comm_s();
  out.opLevelCuts.assign(p.op_level_cuts().begin(), p.op_level_cuts().end());
  out.opLevelStepTime = p.op_level_step_time_s();
  out.minOpLevelGain = p.min_op_level_gain();
  out.refillWaitSeconds = p.refill_wait_s();
  int expectFirst = 0;
  for (auto& q : p.stages()) {
    PlanStage s;
    s.index = q.index();
    s.firstNode = q.first_node();
    s.endNode = q.end_node();
    SLUICE_CHECK(s.index == static_cast<int>(out.stages.size()) && s.firstNode == expectFirst && s.endNode > s.firstNode,
                 PlanError, "plan " << origin << " is inconsistent: stage " << s.index << " covers [" << s.firstNode
                                    << ", " << s.endNode << ")");
    expectFirst = s.endNode;
    s.boundaryInputs.assign(q.boundary_inputs().begin(), q.boundary_inputs().end());
    s.params.assign(q.params().begin(), q.params().end());
    s.paramBytes = q.param_bytes();
    s.inFlight = q.in_flight();
    s.forward = q.forward_s();
    s.backward = q.backward_s();
    s.comm = q.comm_s();
    s.swap = q.swap_s();
    s.recompute = q.recompute_s();
    s.loss = q.loss_s();
    s.time = q.time_s();
    s.savedBytes = q.saved_bytes();
    s.keptBytes = q.kept_bytes();
    s.swappedBytes = q.swapped_bytes();
    s.recomputedBytes = q.recomputed_bytes();
    s.staticBytes = q.static_bytes();
    s.peakBytes = q.peak_bytes();
    s.boundaryBytes = q.boundary_bytes();
    s.heldBytes = q.held_bytes();
    s.transientBytes = q.transient_bytes();
    s.windowBytes = q.window_bytes();
    s.swapIO = q.swap_io_s();
    s.scheduleForward = q.schedule_forward_s();
    s.scheduleBackwardInput = q.schedule_backward_input_s();
    s.scheduleBackwardWeight = q.schedule_backward_weight_s();
    s.refill = q.refill_s();
    s.refillShare = q.refill_share();
    s.rankPeakBytes = q.rank_peak_bytes();
    out.stages.push_back(std::move(s));
  }
  for (auto& q : p.decisions()) {
    TensorDecision d;
    d.node = q.node();
    d.slot = q.slot();
    d.stage = q.stage();
    d.op = q.op();
    d.bytes = q.bytes();
    d.action = parseAction(q.action(), origin);
    d.segment.assign(q.segment().begin(), q.segment().end());
    SLUICE_CHECK(0 <= d.stage && d.stage < static_cast<int>(out.stages.size()), PlanError,
                 "plan " << origin << " is inconsistent: a decision names stage " << d.stage);
    out.decisions.push_back(std::move(d));
  }
  return out;
}

Plan Plan::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SLUICE_CHECK(f, PlanError, "cannot open plan " << path);
  std::ostringstream os;
  os << f.rdbuf();
  return fromBytes(os.str(), path);
}

void Plan::checkMatches(const OpGraph& graph, int stageCount, const std::string& origin) const {
  SLUICE_CHECK(graphHash == graph.hash(), PlanError,
               "plan " << origin << " was made for another model or batch shape (graph hash " << graphHash
                       << "; this config captures " << graph.hash()
                       << "): make a plan for this config with `sluice profile` and `sluice partition`");
  SLUICE_CHECK(static_cast<int>(stages.size()) == stageCount, PlanError,
               "plan " << origin << " has " << stages.size() << " stages but the config runs " << stageCount
                       << " (pipeline.stages x pipeline.chunks)");
  SLUICE_CHECK(stages.back().endNode == graph.numNodes(), PlanError,
               "plan " << origin << " ends at node " << stages.back().endNode << " but the graph has "
                       << graph.numNodes());
}

std::vector<TensorDecision> Plan::stageDecisions(int stage) const {
  std::vector<TensorDecision> out;
  for (auto& d : decisions) {
    if (d.stage == stage) out.push_back(d);
  }
  return out;
}

std::string Plan::table() const {
  std::ostringstream os;
  char buf[400];
  auto mib = [](int64_t b) { return formatBytes(b); };
  std::snprintf(buf, sizeof(buf),
                "plan for graph %s: method %s, memory policy %s, %s, %d micro-batches of %d, data parallel %d, budget %s\n",
                graphHash.c_str(), method.c_str(), policy.c_str(),
                (schedule + (scheduleCosts() ? " fitted to the stage times" : "") +
                 (chunks > 1 ? " (" + std::to_string(chunks) + " stages per rank, stage s on rank s % " +
                                   std::to_string(stages.size() / chunks) + ")"
                             : "")).c_str(),
                microBatches, microBatchSize, dataParallel,
                budgetBytes > 0 ? (mib(budgetBytes) + (chunks > 1 ? " per rank, an equal share per stage" : " per stage")).c_str()
                                : "none");
  os << buf;
  std::snprintf(buf, sizeof(buf), "%5s %14s %10s %8s %8s %8s %8s %8s  %-23s %10s %10s\n", "stage", "nodes", "params",
                "fwd ms", "bwd ms", "comm ms", "extra ms", "time ms", "peak memory / budget", "swapped", "recomputed");
  os << buf;
  for (auto& s : stages) {
    const std::string range = "[" + std::to_string(s.firstNode) + ", " + std::to_string(s.endNode) + ")";
    const std::string memory =
        mib(s.peakBytes) + " / " + (budgetBytes > 0 ? mib(budgetBytes / std::max(1, chunks)) : std::string("-"));
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

Problem makeProblem(const OpGraph& graph, const Profile& profile, const PlanSettings& st) {
  SLUICE_CHECK(profile.graphHash == graph.hash() && static_cast<int>(profile.nodes.size()) == graph.numNodes(),
               PlanError, "the profile was made for another graph (hash " << profile.graphHash << ", this config "
                                                                          << "captures " << graph.hash() << ")");
  SLUICE_CHECK(st.policy == "plan" || st.policy == "none" || st.policy == "full_recompute", PlanError,
               "partition: unknown memory policy '" << st.policy << "' (plan | none | full_recompute)");
  Problem p;
  const int n = graph.numNodes();
  for (auto& node : profile.nodes) {
    p.nodes.push_back({node.forwardSeconds, node.backwardSeconds, node.paramBytes, node.workspaceBytes});
  }
  {  // Parameters read by several nodes (tied weights): counted on every stage that reads them.
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
        p.sharedParams.push_back({in.value.bytes(), it->second});
      }
    }
  }
  p.storages = savedStorages(graph, profile.facts);
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
  p.lossSeconds = profile.lossForwardSeconds + profile.lossBackwardSeconds;
  p.lossSavedBytes = profile.lossSavedBytes;
  p.lossWorkspace = profile.lossWorkspaceBytes;
  p.p2pBandwidth = profile.machine.p2pBandwidth;
  p.p2pLatency = profile.machine.p2pLatency;
  const auto& m = profile.machine;
  p.swapSecondsPerByte = st.swap && m.swapWriteBandwidth > 0 && m.swapReadBandwidth > 0
                             ? 1.0 / m.swapWriteBandwidth + 1.0 / m.swapReadBandwidth
                             : 0.0;
  p.swapCpuSecondsPerByte = p.swapSecondsPerByte > 0 ? m.swapCpuSecondsPerByte : 0.0;
  p.swapWindowBytes = st.swapWindowBytes;
  p.swapWindowShare = st.swapWindowShare;
  if (p.swapWindowBytes == 0 && (p.swapWindowShare == 0 || st.budgetBytes == 0)) p.swapWindowBytes = 64ll << 20;
  SLUICE_CHECK(st.chunks >= 1, PlanError, "partition: chunks per rank must be >= 1, got " << st.chunks);
  p.stages = st.stages * st.chunks;
  p.microBatches = st.microBatches;
  const auto& names = pipeline::scheduleNames();
  SLUICE_CHECK(std::find(names.begin(), names.end(), st.schedule) != names.end(), PlanError,
               "partition: unknown schedule '" << st.schedule << "' (gpipe | 1f1b | zb-h1 | interleaved | interleaved-zb)");
  p.gpipe = st.schedule == "gpipe";
  const auto schedule = pipeline::makeSchedule(st.schedule, st.stages, st.microBatches, st.chunks);
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
    p.weightGradPrefix.assign(n + 1, 0);
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
      p.weightGradPrefix[j + 1] = p.weightGradPrefix[j] + (mixed[j] && !alias ? node.outputBytes : 0);
    }
  }
  // A rank holds its chunks' stages at once: each gets an equal share of the budget.
  p.budgetBytes = st.budgetBytes / st.chunks;
  p.budgetShares = st.chunks;
  // Weights + gradients + Adam's two moments (sharded over data parallel by DistAdam).
  p.staticPerParamByte = 2.0 + (st.distAdam ? 2.0 / std::max(1, st.dataParallel) : 2.0);
  if (st.distAdam && st.dataParallel > 1) {
    p.stepRanks = st.dataParallel;
    p.stepBucketBytes = st.distAdamBucketBytes;
  }
  if (st.policy != "plan") {
    // Nothing is left for the partitioner to free: `none` keeps everything and
    // full_recompute's choices are fixed (fullRecomputeChoices).
    p.swapSecondsPerByte = 0;
    if (st.policy == "none") {
      for (auto& s : p.storages) s.lastParamWriter = n;
    }
  }
  p.validate();
  return p;
}


namespace {

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

// The costs a schedule other than GPipe and 1F1B (zb-h1, interleaved,
// interleaved-zb) is simulated with: each stage's predicted time less its
// communication, split in the profile's forward : backward ratio, and its
// backward into the weight gradients (the profiled weightBackwardSeconds of
// its nodes) and the rest (input gradients, with the loss); on stage 0, whose
// inputs need no gradient, all of it is weight work. Each message delays its
// receiver by the slowest cut's one-way transfer (sends are nonblocking and
// receives posted ahead, so messages overlap compute).
pipeline::ScheduleCosts scheduleCostsOf(const Profile& profile, const Partition& part, const Problem& p) {
  pipeline::ScheduleCosts costs;
  for (auto& s : part.stages) {
    const double fb = s.forward + s.backward, busy = s.time - s.comm;
    const double f = fb > 0 ? busy * s.forward / fb : busy / 2, b = busy - f;
    double nodesBackward = 0, weight = 0;
    for (int j = s.first; j < s.end; ++j) {
      nodesBackward += profile.nodes[j].backwardSeconds;
      weight += profile.nodes[j].weightBackwardSeconds;
    }
    const double w = s.stage == 0 ? b : nodesBackward > 0 ? s.backward * weight / nodesBackward : b / 2;
    costs.times.push_back({f, b, b - w, w});
  }
  for (int cut : part.cuts) costs.comm = std::max(costs.comm, commSeconds(p, cut) / 2);
  return costs;
}

// Each stage's refill share (refillShare: its nodes' pieces', by their times).
pipeline::RefillCosts refillCostsOf(const Profile& profile, const Partition& part) {
  pipeline::RefillCosts refill;
  if (profile.refill.pieces.empty()) return refill;
  refill.waitSeconds = profile.refill.waitSeconds;
  for (auto& s : part.stages) refill.share.push_back(refillShare(profile, s.first, s.end));
  return refill;
}

// A partition's predicted step time and each stage's refill per micro-batch.
struct Prediction {
  double stepTime = 0;
  std::vector<double> refill;
};

// The predicted step: for zb-h1, interleaved and interleaved-zb simulated
// (pipeline::simulateStepWithRefill) with scheduleCostsOf, on the schedule
// training will run (zb-h1 and interleaved-zb fitted to the same costs, which
// the plan records); the DP's cuts come from the 1F1B objective, and
// refineForSchedule then moves them for this simulated step. For GPipe and
// 1F1B the DP's own step (CostModel.h), plus what refill adds to the same
// simulation. Refill (Note [refill after a wait], Refill.h) depends on where
// the schedule makes ranks wait, so the DP does not see it; the prediction
// does: mostly it slows a light stage that waits for most of the step, which
// the step does not wait for.
Prediction predict(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p) {
  const auto refill = refillCostsOf(profile, part);
  const bool charged = refill.charged();
  Prediction out;
  out.refill.assign(part.stages.size(), 0.0);
  if (p.inFlightPerStage.empty() && !charged) {
    out.stepTime = part.stepTime;
    return out;
  }
  const auto costs = scheduleCostsOf(profile, part, p);
  const auto schedule =
      pipeline::makeSchedule(st.schedule, st.stages, st.microBatches, st.chunks, st.fitSchedule ? &costs : nullptr);
  const auto sim = pipeline::simulateStepWithRefill(schedule, costs.times, costs.comm, refill);
  for (size_t k = 0; k < out.refill.size() && k < sim.refillSeconds.size(); ++k) {
    out.refill[k] = sim.refillSeconds[k] / st.microBatches;
  }
  out.stepTime = p.inFlightPerStage.empty()
                     ? part.stepTime + (sim.stepTime - pipeline::simulateStep(schedule, costs.times, costs.comm))
                     : sim.stepTime;
  return out;
}

double simulatedStepTime(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p) {
  return predict(st, profile, part, p).stepTime;
}

// Several stages per rank: each rank's predicted peak, its stages together
// (PlanStage::rankPeakBytes). Their micro-batches' holdings peak at
// different moments of the rank's order, so the rank's holding is the most
// at one moment (pipeline::rankHoldingMoments), not the sum of the stages'.
// The stages' budget bounds (each within its share) still hold the rank's
// peak within memory.budget_mb; this is the prediction.
// Note [communication buffers]: while a rank runs an action, the receives
// of its next compute action are already posted (pipeline::runStep posts
// them ahead, into buffers of the boundary's size), and the sends of its
// previous compute action may still hold their tensors (a send above MPI's
// eager limit completes only when the peer takes it). Neither is a stage's
// saved tensor, so the holding moments alone miss them: measured, a rank of
// interleaved-zb peaked one boundary tensor (16-32 KiB) above that
// prediction, by turns, run to run. Per action of the rank: the previous
// compute action's sends and the next one's receives (boundaryBytes: a
// stage's inputs; its outputs are the next stage's inputs, and gradients
// have the size of the values they belong to).
std::vector<int64_t> communicationBuffers(const pipeline::Schedule& schedule, int rank, const Partition& part) {
  using pipeline::ActionKind;
  std::map<int, int64_t> inputBytes;
  for (auto& s : part.stages) inputBytes[s.stage] = s.boundaryBytes;
  auto bytesOf = [&](int stage) { return inputBytes.count(stage) ? inputBytes.at(stage) : int64_t{0}; };
  const int last = schedule.stages - 1;
  auto backward = [](const pipeline::Action& a) {
    return a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput;
  };
  auto sends = [&](const pipeline::Action& a) -> int64_t {
    if (a.kind == ActionKind::Forward) return a.stage < last ? bytesOf(a.stage + 1) : 0;
    return backward(a) && a.stage > 0 ? bytesOf(a.stage) : 0;
  };
  auto receives = [&](const pipeline::Action& a) -> int64_t {
    if (a.kind == ActionKind::Forward) return a.stage > 0 ? bytesOf(a.stage) : 0;
    return backward(a) && a.stage < last ? bytesOf(a.stage + 1) : 0;
  };
  const auto& actions = schedule.actions.at(rank);
  std::vector<int64_t> out(actions.size(), 0);
  int64_t pendingSends = 0;  // of the last compute action before x
  for (size_t x = 0; x < actions.size(); ++x) {
    int64_t posted = 0;
    for (size_t y = x + 1; y < actions.size(); ++y) {
      if (pipeline::isCompute(actions[y])) {
        posted = receives(actions[y]);
        break;
      }
    }
    out[x] = pendingSends + posted;
    if (pipeline::isCompute(actions[x])) pendingSends = sends(actions[x]);
  }
  return out;
}

void setRankPeaks(Plan& plan, const Partition& part, const PlanSettings& st,
                  const std::optional<pipeline::ScheduleCosts>& costs) {
  const auto schedule =
      pipeline::makeSchedule(st.schedule, st.stages, st.microBatches, st.chunks, costs ? &*costs : nullptr);
  for (int rank = 0; rank < schedule.rankCount(); ++rank) {
    // A rank runs one stage's action at a time: at each moment of its order,
    // what its stages hold plus the acting stage's transient; and the largest
    // swap window (its stages share one engine, launcher/Trainer.cpp).
    int64_t fixed = 0, window = 0, peak = 0;
    std::map<int, const StageCost*> mine;
    for (auto& s : part.stages) {
      if (schedule.rankOf(s.stage) != rank) continue;
      mine[s.stage] = &s;
      fixed += s.staticBytes;
      window = std::max(window, s.windowBytes);
    }
    const auto buffers = communicationBuffers(schedule, rank, part);  // Note [communication buffers]
    for (const auto& moment : pipeline::rankHoldingMoments(schedule, rank)) {
      int64_t now = mine.at(moment.acting)->transientBytes + buffers.at(moment.action);
      for (auto& [index, s] : mine) {
        const auto& m = moment.mix.at(index);
        now += m.beforeInput * s->heldBytes + m.beforeWeight * s->heldWeightBytes + (m.capturing ? s->capturedBytes : 0);
      }
      peak = std::max(peak, now);
    }
    const int64_t rankPeak = fixed + window + peak;
    for (auto& ps : plan.stages) {
      if (schedule.rankOf(ps.index) == rank) ps.rankPeakBytes = rankPeak;
    }
  }
}

Plan toPlan(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& problem,
            const Partition& part) {
  auto split = splitGraph(graph, part.cuts);
  Plan plan;
  plan.graphHash = graph.hash();
  plan.method = st.method;
  plan.policy = st.policy;
  plan.schedule = st.schedule;
  plan.microBatches = st.microBatches;
  plan.chunks = st.chunks;
  plan.microBatchSize = profile.microBatchSize;
  plan.dataParallel = st.dataParallel;
  plan.budgetBytes = st.budgetBytes;
  plan.swapWindowBytes = problem.window();
  plan.profileBlas = profile.machine.blas;
  plan.profileThreads = profile.machine.threads;
  const auto predicted = predict(st, profile, part, problem);
  plan.stepTime = predicted.stepTime;
  const auto refill = refillCostsOf(profile, part);
  plan.refillWaitSeconds = refill.waitSeconds;
  std::optional<pipeline::ScheduleCosts> costs;
  if (!problem.inFlightPerStage.empty() && st.fitSchedule && pipeline::fitsToStageTimes(st.schedule)) {
    costs = scheduleCostsOf(profile, part, problem);  // recorded: training fits its schedule to them too
    plan.scheduleComm = costs->comm;
  }
  double busy = 0;
  for (auto& s : part.stages) {
    PlanStage ps;
    ps.index = s.stage;
    ps.firstNode = s.first;
    ps.endNode = s.end;
    ps.inFlight = s.inFlight;
    for (auto& v : split[s.stage].boundaryInputs) ps.boundaryInputs.push_back(v.name);
    ps.params = split[s.stage].paramInputs;
    ps.paramBytes = s.paramBytes;
    ps.forward = s.forward;
    ps.backward = s.backward;
    ps.comm = s.comm;
    ps.swap = s.swapStall + s.swapCpu;
    ps.swapIO = s.swapIO;
    ps.recompute = s.recompute;
    ps.loss = s.loss;
    ps.refill = predicted.refill.at(s.stage);
    if (refill.charged()) ps.refillShare = refill.share.at(s.stage);
    ps.time = s.time + ps.refill;
    ps.savedBytes = s.savedBytes;
    ps.keptBytes = s.keptBytes;
    ps.swappedBytes = s.swappedBytes;
    ps.recomputedBytes = s.recomputedBytes;
    ps.staticBytes = s.staticBytes;
    ps.peakBytes = s.peakBytes;
    ps.boundaryBytes = s.boundaryBytes;
    ps.heldBytes = s.heldBytes;
    ps.transientBytes = s.transientBytes;
    ps.windowBytes = s.windowBytes;
    if (costs) {
      const auto& t = costs->times.at(s.stage);
      ps.scheduleForward = t.forward;
      ps.scheduleBackwardInput = t.backwardInput;
      ps.scheduleBackwardWeight = t.backwardWeight;
    }
    for (auto [x, action] : s.freed) {
      const auto& storage = problem.storages[x];
      TensorDecision d;
      d.node = storage.producer;
      d.slot = storage.slot;
      d.stage = s.stage;
      d.op = graph.nodes()[storage.producer].op;
      d.bytes = storage.bytes;
      d.action = action;
      if (action == Action::Recompute) {
        for (int node : storage.segment) {
          if (node >= s.first) d.segment.push_back(node);
        }
      }
      plan.decisions.push_back(std::move(d));
    }
    // Simulated schedules count communication as latency, not as busy time.
    busy += st.microBatches * ((problem.inFlightPerStage.empty() ? s.time : s.time - s.comm) + ps.refill);
    plan.stages.push_back(std::move(ps));
  }
  if (!problem.inFlightPerStage.empty() && st.chunks > 1) setRankPeaks(plan, part, st, costs);
  // Idle share of the step, averaged over ranks.
  plan.bubbleFraction = plan.stepTime > 0 ? 1.0 - busy / (st.stages * plan.stepTime) : 0.0;
  return plan;
}

// A baseline policy on given cuts: its fixed choices (everything kept, or
// full_recompute's), checked against the budget. With the choices fixed there
// is no knapsack to keep exact, so the check uses the predicted peak itself
// (CostModel.h), not the bound the partitioner's choices must fit.
Partition fixedPartition(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& p,
                         const std::vector<int>& cuts) {
  Partition out;
  out.cuts = cuts;
  for (int k = 0; k < p.stages; ++k) {
    const int first = k == 0 ? 0 : cuts[k - 1], end = k + 1 == p.stages ? p.numNodes() : cuts[k];
    const auto freed = st.policy == "full_recompute" ? fullRecomputeChoices(graph, profile, p, first, end)
                                                     : std::vector<std::pair<int, Action>>{};
    auto s = evaluateStage(p, k, first, end, freed);
    s.fits = p.budgetBytes <= 0 || s.peakBytes <= p.budgetBytes;
    SLUICE_CHECK(s.fits, PlanError,
                 "partition: with memory.policy " << st.policy << ", stage " << k << " (nodes [" << first << ", "
                     << end << ")) needs " << formatBytesExact(s.peakBytes) << "; the budget is "
                     << formatBytesExact(p.budgetBytes) << ". Raise memory.budget_mb, use more stages, or let the "
                     << "partitioner free memory (memory.policy plan)");
    out.stages.push_back(std::move(s));
  }
  out.stepTime = stepTime(out.stages, p.microBatches);
  return out;
}

Partition partitionFor(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& p,
                       const std::vector<int>* cuts) {
  if (st.policy != "plan") {
    // The split that is fastest without a budget; the fixed choices must then fit.
    std::vector<int> chosen;
    if (cuts) {
      chosen = *cuts;
    } else {
      Problem unlimited = p;
      unlimited.budgetBytes = 0;
      chosen = partitionOptimal(unlimited).cuts;
    }
    return fixedPartition(graph, profile, st, p, chosen);
  }
  return cuts ? partitionWithCuts(p, *cuts) : partitionOptimal(p);
}

// Schedules other than GPipe and 1F1B (zb-h1, interleaved, interleaved-zb):
// the DP's cuts minimise the 1F1B objective (sum t + (m - 1) max t), which
// balances stages one by one; these schedules' step also depends on how the
// stages' times add up per rank and on which stage starts and ends the
// pipeline. So move one cut at a time by up to kRefineReach nodes (coordinate descent)
// while the simulated step (simulatedStepTime) improves. Every candidate is
// evaluated exactly as the final plan is (its stages' best actions within the
// budget; cuts that are invalid or do not fit are skipped).
Partition refineForSchedule(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& p,
                            Partition part) {
  if (p.inFlightPerStage.empty() || part.cuts.empty()) return part;
  double best = simulatedStepTime(st, profile, part, p);
  for (int round = 0; round < 256; ++round) {  // each round but the last improves the step
    bool improved = false;
    for (size_t k = 0; k < part.cuts.size(); ++k) {
      for (int step = 1; step <= 2 * kRefineReach; ++step) {
        const int delta = step % 2 ? (step + 1) / 2 : -step / 2;  // 1, -1, 2, -2, ...
        auto cuts = part.cuts;
        cuts[k] += delta;
        const int lo = k == 0 ? 1 : cuts[k - 1] + 1, hi = k + 1 < cuts.size() ? cuts[k + 1] - 1 : p.numNodes() - 1;
        // Fixed policies (none, full_recompute) do not check cuts themselves: skip invalid ones here.
        if (cuts[k] < lo || cuts[k] > hi || !p.validCut[cuts[k]]) continue;
        try {
          auto candidate = partitionFor(graph, profile, st, p, &cuts);
          const double t = simulatedStepTime(st, profile, candidate, p);
          if (t < best * (1 - 1e-9)) {
            best = t;
            part = std::move(candidate);
            improved = true;
          }
        } catch (const PlanError&) {
        } catch (const GraphError&) {
        }
      }
    }
    if (!improved) break;
  }
  return part;
}

// The step time a plan of `part` predicts (toPlan's stepTime).
double predictedStep(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p) {
  return predict(st, profile, part, p).stepTime;
}

// Note [layer boundaries first]: the profile method's best cuts between
// layers (the cost model's optimum with cuts only on layerBoundaries()), when
// the op-level optimum `opLevel` is not predicted at least
// st.minOpLevelGain of the step faster; else nothing. Why: two splits a few
// ops apart are predicted within a percent or two of each other, well inside
// the cost model's step-time error (bench/partition: measured/predicted 0.97
// to 1.04), so such a "gain" is noise; a cut between layers hands the next
// stage only the residual stream, never a parameter view or a half-finished
// block, and is the split users and the `layers` peer expect. Where op-level
// cuts pay (a model with fewer heavy layers than stages can share evenly,
// bench/partition's one_block: 1.29x) the gain is far above the threshold.
struct LayerAligned {
  Partition partition;
  double opLevelStep = 0;  // the passed-over op-level optimum's predicted step
};

std::optional<LayerAligned> layerAligned(const OpGraph& graph, const Profile& profile, const PlanSettings& st,
                                         const Problem& p, const Partition& opLevel) {
  if (st.minOpLevelGain <= 0 || opLevel.cuts.empty()) return std::nullopt;
  const auto bounds = layerBoundaries(graph);
  std::vector<char> onBoundary(p.numNodes() + 1, 0);
  for (int b : bounds) onBoundary[b] = 1;
  if (std::all_of(opLevel.cuts.begin(), opLevel.cuts.end(), [&](int c) { return onBoundary[c] != 0; })) {
    return std::nullopt;  // already there
  }
  Problem layered = p;
  for (int c = 1; c < p.numNodes(); ++c) layered.validCut[c] = p.validCut[c] && onBoundary[c];
  try {
    auto aligned = refineForSchedule(graph, profile, st, layered, partitionFor(graph, profile, st, layered, nullptr));
    const double op = predictedStep(st, profile, opLevel, p), layer = predictedStep(st, profile, aligned, p);
    if (op >= layer * (1 - st.minOpLevelGain)) return LayerAligned{std::move(aligned), op};
  } catch (const PlanError&) {  // too few layers, or no split on them fits the budget
  } catch (const GraphError&) {
  }
  return std::nullopt;
}

}  // namespace

Plan makePlan(const OpGraph& graph, const Profile& profile, const PlanSettings& st) {
  const int pieces = st.stages * st.chunks;
  if (st.method == "uniform") return planForCuts(graph, profile, st, uniformCuts(graph, pieces));
  if (st.method == "parameters") return planForCuts(graph, profile, st, parameterCuts(graph, pieces));
  if (st.method == "layers") return planForCuts(graph, profile, st, layerCuts(graph, profile, pieces));
  SLUICE_CHECK(st.method == "profile", PlanError,
               "partition: unknown method '" << st.method << "' (profile | uniform | parameters | layers)");
  SLUICE_CHECK(st.minOpLevelGain >= 0 && st.minOpLevelGain < 1, PlanError,
               "partition: the minimum op-level gain must be in [0, 1), got " << st.minOpLevelGain);
  auto problem = makeProblem(graph, profile, st);
  auto opLevel = refineForSchedule(graph, profile, st, problem, partitionFor(graph, profile, st, problem, nullptr));
  auto aligned = layerAligned(graph, profile, st, problem, opLevel);
  if (!aligned) return toPlan(graph, profile, st, problem, opLevel);
  auto plan = toPlan(graph, profile, st, problem, aligned->partition);
  plan.opLevelCuts = opLevel.cuts;
  plan.opLevelStepTime = aligned->opLevelStep;
  plan.minOpLevelGain = st.minOpLevelGain;
  return plan;
}

Plan planForCuts(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const std::vector<int>& cuts) {
  splitGraph(graph, cuts);  // GraphError naming nearby valid cuts when one is invalid
  auto problem = makeProblem(graph, profile, st);
  return toPlan(graph, profile, st, problem, partitionFor(graph, profile, st, problem, &cuts));
}

}  // namespace sluice::partition
