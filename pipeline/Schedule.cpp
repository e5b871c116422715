#include "pipeline/Schedule.h"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>

#include "core/Error.h"
#include "pipeline/ScheduleKinds.h"
#include "pipeline/ScheduleParts.h"

namespace sluice::pipeline {

using detail::checkDims;
using detail::checkInterleaved;
using detail::PieceOrder;

int Placement::rankOf(int stage) const {
  if (v && stage >= ranks) return 2 * ranks - 1 - stage;
  return stage % ranks;
}

std::string Placement::describe() const {
  if (v) return "in a V: rank r hosts stages r and " + std::to_string(2 * ranks - 1) + " - r";
  return "stage s on rank s % " + std::to_string(ranks);
}

std::vector<int> Placement::stagesOf(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < ranks * chunks; ++s) {
    if (rankOf(s) == rank) out.push_back(s);
  }
  return out;
}

void appendForward(std::vector<Action>& out, int stage, int stages, int mb) {
  if (stage > 0) out.push_back({ActionKind::RecvActivation, mb, stage});
  out.push_back({ActionKind::Forward, mb, stage});
  if (stage < stages - 1) out.push_back({ActionKind::SendActivation, mb, stage});
}

void appendBackward(std::vector<Action>& out, int stage, int stages, int mb) {
  if (stage < stages - 1) out.push_back({ActionKind::RecvGrad, mb, stage});
  out.push_back({ActionKind::Backward, mb, stage});
  if (stage > 0) out.push_back({ActionKind::SendGrad, mb, stage});
}


Schedule makeGPipe(int stages, int microBatches) {
  checkDims(stages, microBatches);
  Schedule s{"", stages, microBatches, std::vector<std::vector<Action>>(stages)};
  for (int st = 0; st < stages; ++st) {
    for (int mb = 0; mb < microBatches; ++mb) appendForward(s.actions[st], st, stages, mb);
    for (int mb = 0; mb < microBatches; ++mb) appendBackward(s.actions[st], st, stages, mb);
  }
  return s;
}

Schedule make1F1B(int stages, int microBatches) {
  checkDims(stages, microBatches);
  Schedule s{"", stages, microBatches, std::vector<std::vector<Action>>(stages)};
  for (int st = 0; st < stages; ++st) {
    auto& out = s.actions[st];
    const int warmup = std::min(stages - st - 1, microBatches);
    int nextF = 0, nextB = 0;
    for (; nextF < warmup; ++nextF) appendForward(out, st, stages, nextF);
    while (nextF < microBatches) {
      appendForward(out, st, stages, nextF++);
      appendBackward(out, st, stages, nextB++);
    }
    while (nextB < microBatches) appendBackward(out, st, stages, nextB++);
  }
  return s;
}

Schedule makeInterleaved1F1B(int ranks, int chunks, int microBatches, const std::string& what) {
  checkInterleaved(what, ranks, chunks, microBatches);
  const int p = ranks, v = chunks, m = microBatches;
  const int stages = p * v, total = m * v;
  Schedule s{"", stages, m, std::vector<std::vector<Action>>(p), p};
  const PieceOrder order{p, v, m};
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    const int warmup = order.warmup(r);
    auto forward = [&](int k) { appendForward(out, order.forwardStage(k, r), stages, order.microBatchOf(k)); };
    auto backward = [&](int k) { appendBackward(out, order.backwardStage(k, r), stages, order.microBatchOf(k)); };
    int nextF = 0, nextB = 0;
    for (; nextF < warmup; ++nextF) forward(nextF);
    while (nextF < total) {
      forward(nextF++);
      backward(nextB++);
    }
    while (nextB < total) backward(nextB++);
  }
  return s;
}

std::vector<Action> Schedule::stageActions(int stage) const {
  std::vector<Action> out;
  const int r = rankOf(stage);
  if (r < static_cast<int>(actions.size())) {
    for (auto& a : actions[r]) {
      if (a.stage == stage) out.push_back(a);
    }
  }
  return out;
}

std::vector<std::string> scheduleNames() {
  std::vector<std::string> names;
  for (auto& k : scheduleKinds()) names.push_back(k.name);
  return names;
}

std::string scheduleLabel(const ScheduleKind& kind, int chunks) {
  return kind.name + (kind.interleaves && chunks > 1 ? " x" + std::to_string(chunks) : "");
}

std::string scheduleLabel(const std::string& name, int chunks) {
  const auto* k = findScheduleKind(name);
  return k ? scheduleLabel(*k, chunks) : name;
}

Placement placementOf(const ScheduleKind& kind, int ranks, int chunks) { return {ranks, chunks, kind.vShape}; }

Placement placementOf(const std::string& name, int ranks, int chunks) {
  return placementOf(scheduleKind(name), ranks, chunks);
}

Schedule makeSchedule(const ScheduleKind& kind, int stages, int microBatches, int chunks, const ScheduleCosts* costs) {
  SLUICE_CHECK(kind.interleaves || chunks == 1, ScheduleError,
               "schedule '" << kind.name << "' runs one stage per rank; only the interleaved schedules take " << chunks
                            << " chunks");
  return kind.build(stages, chunks, microBatches, kind.fitsStageTimes ? costs : nullptr);  // named by its row
}

Schedule makeSchedule(const std::string& name, int stages, int microBatches, int chunks, const ScheduleCosts* costs) {
  return makeSchedule(scheduleKind(name), stages, microBatches, chunks, costs);
}

bool splitsBackward(const Schedule& schedule) {
  for (auto& stage : schedule.actions) {
    for (auto& a : stage) {
      if (a.kind == ActionKind::BackwardInput || a.kind == ActionKind::BackwardWeight) return true;
    }
  }
  return false;
}

std::string toString(ActionKind kind) {
  switch (kind) {
    case ActionKind::RecvActivation: return "recv_act";
    case ActionKind::Forward: return "F";
    case ActionKind::SendActivation: return "send_act";
    case ActionKind::RecvGrad: return "recv_grad";
    case ActionKind::Backward: return "B";
    case ActionKind::SendGrad: return "send_grad";
    case ActionKind::BackwardInput: return "Bi";
    case ActionKind::BackwardWeight: return "W";
  }
  return "?";
}

std::string toString(const Action& a) { return toString(a.kind) + std::to_string(a.microBatch); }

std::string scheduleTitle(const Schedule& s) {
  return s.name.empty() ? "schedule (unnamed)" : "schedule '" + s.name + "'";
}

std::string toString(const Schedule& s) {
  std::ostringstream os;
  const bool chunked = s.chunks() > 1;
  os << (s.name.empty() ? "(unnamed)" : s.name) << " (stages=" << s.stages
     << (chunked ? ", ranks=" + std::to_string(s.rankCount()) : "")
     << ", micro-batches=" << s.microBatches << ")\n";
  for (size_t r = 0; r < s.actions.size(); ++r) {
    os << "  " << (chunked ? "rank " : "stage ") << r << ":";
    for (auto& a : s.actions[r]) os << " " << toString(a) << (chunked ? "/s" + std::to_string(a.stage) : "");
    os << "\n";
  }
  return os.str();
}

namespace {

// Per stage, the most micro-batches at once between an action of kind `open`
// and the next of kind `close` or `closeToo`.
std::vector<int> peakOpen(const Schedule& s, ActionKind open, ActionKind close, ActionKind closeToo) {
  std::vector<int> peak(s.stages, 0);
  for (int st = 0; st < s.stages; ++st) {
    int live = 0;
    for (auto& a : s.stageActions(st)) {
      if (a.kind == open) peak[st] = std::max(peak[st], ++live);
      if (a.kind == close || a.kind == closeToo) --live;
    }
  }
  return peak;
}

}  // namespace

std::vector<int> peakWeightPending(const Schedule& s) {
  return peakOpen(s, ActionKind::BackwardInput, ActionKind::BackwardWeight, ActionKind::BackwardWeight);
}

std::vector<int> peakInFlight(const Schedule& s) {
  return peakOpen(s, ActionKind::Forward, ActionKind::Backward, ActionKind::BackwardWeight);
}

std::vector<int> peakAwaitingBackward(const Schedule& s) {
  return peakOpen(s, ActionKind::Forward, ActionKind::Backward, ActionKind::BackwardInput);
}

bool isCompute(const Action& a) {
  return a.kind == ActionKind::Forward || a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput ||
         a.kind == ActionKind::BackwardWeight;
}

bool isBackwardPiece(const Action& a) { return isCompute(a) && a.kind != ActionKind::Forward; }

std::vector<size_t> prefetchTargets(const std::vector<Action>& actions, size_t x,
                                    const std::function<bool(const Action&)>& reads) {
  std::vector<size_t> out;
  if (x >= actions.size() || actions[x].kind == ActionKind::Forward) return out;
  size_t y = x;
  while (y < actions.size() && !isCompute(actions[y])) ++y;
  if (y == actions.size() || !isBackwardPiece(actions[y])) return out;
  if (!isBackwardPiece(actions[x])) {
    if (reads(actions[y])) out.push_back(y);
    return out;
  }
  // A piece's forward comes before it: it ran before x unless it lies in [x, y).
  std::set<std::pair<int, int>> forwardsAhead;  // (stage, micro-batch)
  for (; y < actions.size() && out.size() < 2; ++y) {
    const Action& a = actions[y];
    if (a.kind == ActionKind::Forward) forwardsAhead.emplace(a.stage, a.microBatch);
    if (!isBackwardPiece(a)) continue;
    if (forwardsAhead.count({a.stage, a.microBatch})) break;
    if (reads(a)) out.push_back(y);
  }
  return out;
}

namespace {

// Walks actions (of one stage, or of a rank's stages), calling
// moment(state, acting stage, action index) before and after each action and
// at the end of each BackwardInput.
template <typename Moment>
void walkHolding(const std::vector<Action>& actions, int stages, Moment moment) {
  std::vector<HoldingMix> state(stages);
  for (size_t x = 0; x < actions.size(); ++x) {
    const auto& a = actions[x];
    auto& h = state[a.stage];
    moment(state, a.stage, x);
    if (a.kind == ActionKind::BackwardInput) {
      h.capturing = true;
      moment(state, a.stage, x);
      h.capturing = false;
      --h.beforeInput, ++h.beforeWeight;
    }
    if (a.kind == ActionKind::Forward) ++h.beforeInput;
    if (a.kind == ActionKind::Backward) --h.beforeInput;
    if (a.kind == ActionKind::BackwardWeight) --h.beforeWeight;
    moment(state, a.stage, x);
  }
}

}  // namespace

std::vector<std::vector<HoldingMix>> holdingMixes(const Schedule& s) {
  std::vector<std::vector<HoldingMix>> out(s.stages);
  auto covers = [](const HoldingMix& x, const HoldingMix& y) {
    return x.beforeInput >= y.beforeInput && x.beforeWeight >= y.beforeWeight && (x.capturing || !y.capturing);
  };
  for (int st = 0; st < s.stages; ++st) {
    auto& mixes = out[st];
    walkHolding(s.stageActions(st), s.stages, [&](const std::vector<HoldingMix>& state, int, size_t) {
      const HoldingMix now = state[st];
      if (std::any_of(mixes.begin(), mixes.end(), [&](auto& m) { return covers(m, now); })) return;
      mixes.erase(std::remove_if(mixes.begin(), mixes.end(), [&](auto& m) { return covers(now, m); }), mixes.end());
      mixes.push_back(now);
    });
  }
  return out;
}

std::vector<HoldingMoment> rankHoldingMoments(const Schedule& s, int rank) {
  std::vector<HoldingMoment> out;
  walkHolding(s.actions.at(rank), s.stages, [&](const std::vector<HoldingMix>& state, int acting, size_t action) {
    out.push_back({acting, action, state});
  });
  return out;
}

}  // namespace sluice::pipeline
