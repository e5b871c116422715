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
#include "pipeline/ScheduleSimulation.h"

namespace sluice::partition {
namespace {

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

}  // namespace

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
  const auto schedule = scheduleFor(st, st.fitSchedule ? std::optional(costs) : std::nullopt);
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

namespace {

// Several stages per rank: each rank's predicted peak, its stages together
// (PlanStage::rankPeakBytes). Their micro-batches' holdings peak at
// different moments of the rank's order, so the rank's holding is the most
// at one moment (pipeline::rankHoldingMoments), not the sum of the stages'.
// The stages' budget bounds (each within its share) still hold the rank's
// peak within memory.budget_mb; this is the prediction.
// Each stage's boundary input bytes (its previous stage's output; 0 for a
// stage the partition does not have).
std::function<int64_t(int)> inputBytesOf(const Partition& part) {
  std::map<int, int64_t> bytes;
  for (auto& s : part.stages) bytes[s.stage] = s.boundaryBytes;
  return [bytes](int stage) { return bytes.count(stage) ? bytes.at(stage) : int64_t{0}; };
}

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
  const auto bytesOf = inputBytesOf(part);
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

// Each rank's memory with its stages together (above): the prediction, or
// with `bound` each acting stage's transient as the budget bound counts it
// (transientBound: every freeable storage's span, whatever the plan frees;
// Note [rank budget], Plan.cpp).
std::vector<int64_t> rankMemory(const pipeline::Schedule& schedule, const Partition& part, const Problem* bound) {
  std::vector<int64_t> out;
  const auto inputBytes = inputBytesOf(part);
  for (int rank = 0; rank < schedule.rankCount(); ++rank) {
    // A rank runs one stage's action at a time: at each moment of its order,
    // what its stages hold plus the acting stage's transient; and the largest
    // swap window (its stages share one engine, train/Trainer.cpp).
    int64_t fixed = 0, window = 0, peak = 0;
    std::map<int, const StageCost*> mine;
    std::map<int, int64_t> transient;
    for (auto& s : part.stages) {
      if (schedule.rankOf(s.stage) != rank) continue;
      mine[s.stage] = &s;
      fixed += s.staticBytes;
      window = std::max(window, s.windowBytes);
      transient[s.stage] = bound ? transientBound(*bound, s.first, s.end, s.recomputedBytes > 0) : s.transientBytes;
      // A stage's transient counts a second output gradient for the receive
      // posted ahead or the send still pending (Note [stage buffers],
      // CostModel.cpp); here the action's own buffers count those.
      transient[s.stage] -= inputBytes(s.stage + 1);
    }
    const auto buffers = communicationBuffers(schedule, rank, part);  // Note [communication buffers]
    for (const auto& moment : pipeline::rankHoldingMoments(schedule, rank)) {
      int64_t now = transient.at(moment.acting) + buffers.at(moment.action);
      for (auto& [index, s] : mine) {
        const auto& m = moment.mix.at(index);
        now += m.beforeInput * s->heldBytes + m.beforeWeight * s->heldWeightBytes + (m.capturing ? s->capturedBytes : 0);
      }
      peak = std::max(peak, now);
    }
    out.push_back(fixed + window + peak);
  }
  return out;
}

// The schedule costs training fits its schedule to (recorded in the plan); none for unfitted schedules.
std::optional<pipeline::ScheduleCosts> fittedCosts(const PlanSettings& st, const Profile& profile, const Partition& part,
                                                   const Problem& p) {
  if (p.inFlightPerStage.empty() || !st.fitSchedule || !st.schedule.kind().fitsStageTimes) return std::nullopt;
  return scheduleCostsOf(profile, part, p);
}

void setRankPeaks(Plan& plan, const Partition& part, const PlanSettings& st,
                  const std::optional<pipeline::ScheduleCosts>& costs) {
  const auto schedule = scheduleFor(st, costs);
  const auto peaks = rankMemory(schedule, part, nullptr);
  for (auto& ps : plan.stages) ps.rankPeakBytes = peaks.at(schedule.rankOf(ps.index));
}

}  // namespace

namespace {

// The stage's freed storages as the plan's decisions (recompute with its
// segment's nodes inside the stage).
void addDecisions(Plan& plan, const OpGraph& graph, const Problem& problem, const StageCost& s) {
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
}

// The plan's record of stage s: its nodes and inputs (piece: its part of the
// split graph), predicted times and memory, and the times its schedule is
// fitted to (when it is).
PlanStage planStageOf(const StageCost& s, const StageGraph& piece, const Prediction& predicted,
                      const pipeline::RefillCosts& refill, const std::optional<pipeline::ScheduleCosts>& costs) {
  PlanStage ps;
  ps.index = s.stage;
  ps.firstNode = s.first;
  ps.endNode = s.end;
  ps.inFlight = s.inFlight;
  for (auto& v : piece.boundaryInputs) ps.boundaryInputs.push_back(v.name);
  ps.params = piece.paramInputs;
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
  return ps;
}

}  // namespace

namespace {

// Note [graph pools]: under pipeline.execution: graphs (Note [graphed
// stages], pipeline/StageGraphs.h) a stage keeps one set of graphs per
// micro-batch slot, and each slot's memory pool keeps, for the whole run,
// everything its capture allocated: the micro-batch's held bytes (received
// inputs, kept saved tensors, the loss's), the peak of its temporaries (a
// pool is not given back between replays), its static outputs and their
// gradients' seeds, its inputs' gradients and its parameters' gradients.
// The stage holds as many slots as the schedule keeps micro-batches in
// flight from F to the end of their backward (W when split). A model of
// what the capture allocates, not yet measured on a GPU.
int64_t graphedPeakBytes(const Problem& p, const StageCost& s, int slots) {
  const bool first = s.first == 0, last = s.end == p.numNodes();
  const int64_t outputs = last ? 0 : 2 * p.cutBytes.at(static_cast<size_t>(s.end));
  const int64_t inputGrads = first ? 0 : s.boundaryBytes;
  const int64_t perSlot = s.heldBytes + s.transientBytes + outputs + inputGrads + s.paramBytes;
  return s.staticBytes + static_cast<int64_t>(slots) * perSlot;
}

}  // namespace

std::vector<int64_t> rankBounds(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p) {
  return rankMemory(scheduleFor(st, fittedCosts(st, profile, part, p)), part, &p);
}

Plan toPlan(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& problem,
            const Partition& part) {
  auto split = splitGraph(graph, part.cuts);
  Plan plan;
  plan.graphHash = graph.hash();
  plan.method = st.method;
  plan.policy = st.policy;
  plan.schedule = &st.schedule.kind();
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
  const auto costs = fittedCosts(st, profile, part, problem);  // recorded: training fits its schedule to them too
  if (costs) plan.scheduleComm = costs->comm;
  plan.simulatedCosts = scheduleCostsOf(profile, part, problem);
  double busy = 0;
  const auto slots = st.graphs ? pipeline::peakInFlight(scheduleFor(st, costs)) : std::vector<int>();
  for (auto& s : part.stages) {
    PlanStage ps = planStageOf(s, split[s.stage], predicted, refill, costs);
    if (st.graphs) ps.peakBytes = graphedPeakBytes(problem, s, slots.at(static_cast<size_t>(s.stage)));
    addDecisions(plan, graph, problem, s);
    // Simulated schedules count communication as latency, not as busy time.
    busy += st.microBatches * ((problem.inFlightPerStage.empty() ? s.time : s.time - s.comm) + ps.refill);
    plan.stages.push_back(std::move(ps));
  }
  // (Graphed stages keep their pools all run long: a rank's peak is its stages' sum, Note [graph pools].)
  if (!problem.inFlightPerStage.empty() && st.chunks > 1 && !st.graphs) setRankPeaks(plan, part, st, costs);
  // Idle share of the step, averaged over ranks.
  plan.bubbleFraction = plan.stepTime > 0 ? 1.0 - busy / (st.stages * plan.stepTime) : 0.0;
  return plan;
}

}  // namespace sluice::partition
