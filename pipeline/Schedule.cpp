#include "pipeline/Schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "core/Error.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice::pipeline {

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

namespace {

void appendBackwardInput(std::vector<Action>& out, int stage, int stages, int mb) {
  if (stage < stages - 1) out.push_back({ActionKind::RecvGrad, mb, stage});
  out.push_back({ActionKind::BackwardInput, mb, stage});
  if (stage > 0) out.push_back({ActionKind::SendGrad, mb, stage});
}

void checkDims(int stages, int microBatches) {
  SLUICE_CHECK(stages >= 1, ScheduleError, "a schedule needs at least 1 stage (got " << stages << ")");
  SLUICE_CHECK(microBatches >= 1, ScheduleError, "a schedule needs at least 1 micro-batch (got " << microBatches << ")");
}

// Interleaved 1F1B's piece order: the k-th forward (backward) piece of rank
// r. Micro-batches in groups of p, each group through every chunk (backwards:
// from the last chunk down); with v = 1, 1F1B's order.
struct PieceOrder {
  int p, v, m;
  int microBatchOf(int k) const { return (k / (p * v)) * p + k % p; }
  int forwardStage(int k, int r) const { return ((k / p) % v) * p + r; }
  int backwardStage(int k, int r) const { return (v - 1 - (k / p) % v) * p + r; }
  // Forward pieces rank r runs before its first backward (v > 1). With m == p
  // there is no steady phase to overlap: all of them.
  int warmup(int r) const { return m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p, m * v); }
};

void checkInterleaved(const std::string& name, int ranks, int chunks, int microBatches) {
  checkDims(ranks, microBatches);
  SLUICE_CHECK(chunks >= 1, ScheduleError, name << ": chunks per rank must be at least 1 (got " << chunks << ")");
  SLUICE_CHECK(microBatches % ranks == 0, ScheduleError,
               name << " takes micro-batches p at a time: pipeline.microbatches (" << microBatches
                    << ") must be a multiple of pipeline.stages (" << ranks << ")");
}

}  // namespace

Schedule makeGPipe(int stages, int microBatches) {
  checkDims(stages, microBatches);
  Schedule s{"gpipe", stages, microBatches, std::vector<std::vector<Action>>(stages)};
  for (int st = 0; st < stages; ++st) {
    for (int mb = 0; mb < microBatches; ++mb) appendForward(s.actions[st], st, stages, mb);
    for (int mb = 0; mb < microBatches; ++mb) appendBackward(s.actions[st], st, stages, mb);
  }
  return s;
}

Schedule make1F1B(int stages, int microBatches) {
  checkDims(stages, microBatches);
  Schedule s{"1f1b", stages, microBatches, std::vector<std::vector<Action>>(stages)};
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

namespace {

// The zero-bubble schedules (Schedule.h): list scheduling in time, one rank at
// a time in the order their clocks reach each decision. Each rank runs its
// backward pieces in interleaved 1F1B's order (1F1B's when v = 1) and its
// forward pieces in that order too. Unit costs (costs == nullptr): F = B = W =
// 1, except on stage 0, whose B has nothing to compute (its inputs are data,
// Plan.cpp): B = 0 and W = 2, the whole backward. With costs: each stage's
// own times, and each message arrives `comm` after its send. A free rank runs
// its next B if its gradient is there (and fewer than `caps` Ws wait), else
// its next F if its input is there and memory allows, else its oldest pending
// W, else it waits for the next of those inputs to arrive.
struct RankCaps {
  std::vector<int> toB, toW, pendingW;  // per rank, in pieces: F..B, F..W, B..W
};

// How many pieces list scheduling lets a rank hold: between F and Bi
// (1F1B's p - r, or interleaved 1F1B's warm-up + 1), between F and W (the
// most loaded rank's), and awaiting W; or the caps a fitted schedule keeps.
struct PieceLimits {
  const PieceOrder& order;
  const RankCaps* caps;
  int p, v, m;
  int toB(int r) const { return caps ? caps->toB[r] : v == 1 ? std::min(p - r, m) : order.warmup(r) + 1; }
  int toW(int r) const { return caps ? caps->toW[r] : v == 1 ? std::min(p, m) : order.warmup(0) + 1; }
  int pendingW(int r) const { return caps ? caps->pendingW[r] : m * v; }
};

// A piece's time: the stage's fitted time, or unit costs (stage 0's inputs
// need no gradient: its Bi is empty and its W the whole backward).
struct PieceCosts {
  const ScheduleCosts* costs;
  double forward(int st) const { return costs ? costs->times[st].forward : 1.0; }
  double backwardInput(int st) const { return costs ? costs->times[st].backwardInput : st == 0 ? 0.0 : 1.0; }
  double backwardWeight(int st) const { return costs ? costs->times[st].backwardWeight : st == 0 ? 2.0 : 1.0; }
};

// The rank to act next: the earliest clock among those with work left that
// are not asleep; -1 when none.
int nextRank(const std::vector<int>& left, const std::vector<bool>& asleep, const std::vector<double>& clock) {
  int r = -1;
  for (int q = 0; q < static_cast<int>(left.size()); ++q) {
    if (left[q] > 0 && !asleep[q] && (r < 0 || clock[q] < clock[r])) r = q;
  }
  return r;
}

Schedule listScheduleZeroBubble(const std::string& name, int p, int v, int m, const ScheduleCosts* costs = nullptr,
                                const RankCaps* caps = nullptr) {
  const int stages = p * v, total = m * v;
  Schedule s{name, stages, m, std::vector<std::vector<Action>>(p), v > 1 ? p : 0};
  const PieceOrder order{p, v, m};
  const PieceLimits limits{order, caps, p, v, m};
  const PieceCosts cost{costs};
  const double comm = costs ? costs->comm : 0.0;
  // Finish times; -1: not scheduled yet.
  std::vector<std::vector<double>> fEnd(stages, std::vector<double>(m, -1)), bEnd(stages, std::vector<double>(m, -1));
  std::vector<int> nextF(p, 0), nextB(p, 0), wDone(p, 0), left(p, 3 * total);
  std::vector<double> clock(p, 0);
  std::vector<bool> asleep(p, false);  // waiting for an input nobody has scheduled yet
  std::vector<std::deque<std::pair<int, int>>> pendingW(p);  // (stage, mb), oldest first
  auto arrived = [](double at, double t) { return at >= 0 && at <= t; };
  // When an input sent at `at` (-1: not yet) is there.
  auto arrival = [&](double at) { return at < 0 ? -1.0 : at + comm; };
  for (;;) {
    const int r = nextRank(left, asleep, clock);
    if (r < 0) {
      for (int q = 0; q < p; ++q) {
        SLUICE_CHECK(left[q] == 0, ScheduleError,
                     name << ": list scheduling deadlocked (p=" << p << ", v=" << v << ", m=" << m << ")");
      }
      break;
    }
    const double t = clock[r];
    auto& out = s.actions[r];
    double bInput = -1, fInput = -1;
    int bStage = 0, bMb = 0, fStage = 0, fMb = 0;
    const bool bRoom = static_cast<int>(pendingW[r].size()) < limits.pendingW(r);
    if (nextB[r] < nextF[r]) {
      bStage = order.backwardStage(nextB[r], r);
      bMb = order.microBatchOf(nextB[r]);
      // The last stage's B follows its own F; the others wait for the next stage's gradient.
      bInput = bStage == stages - 1 ? fEnd[bStage][bMb] : arrival(bEnd[bStage + 1][bMb]);
    }
    const bool fRoom = nextF[r] < total && nextF[r] - nextB[r] < limits.toB(r) && nextF[r] - wDone[r] < limits.toW(r);
    if (fRoom) {
      fStage = order.forwardStage(nextF[r], r);
      fMb = order.microBatchOf(nextF[r]);
      fInput = fStage == 0 ? 0.0 : arrival(fEnd[fStage - 1][fMb]);
    }
    if (bRoom && arrived(bInput, t)) {
      appendBackwardInput(out, bStage, stages, bMb);
      bEnd[bStage][bMb] = clock[r] += cost.backwardInput(bStage);
      pendingW[r].push_back({bStage, bMb});
      ++nextB[r];
    } else if (fRoom && arrived(fInput, t)) {
      appendForward(out, fStage, stages, fMb);
      fEnd[fStage][fMb] = clock[r] += cost.forward(fStage);
      ++nextF[r];
    } else if (!pendingW[r].empty()) {
      auto [st, mb] = pendingW[r].front();
      out.push_back({ActionKind::BackwardWeight, mb, st});
      clock[r] += cost.backwardWeight(st);
      pendingW[r].pop_front();
      ++wDone[r];
    } else {
      // Nothing to run now: wait for the earlier of the inputs already on their way.
      double next = std::numeric_limits<double>::infinity();
      if (bInput > t) next = std::min(next, bInput);
      if (fRoom && fInput > t) next = std::min(next, fInput);
      if (next < std::numeric_limits<double>::infinity()) {
        clock[r] = next;
      } else {
        asleep[r] = true;
      }
      continue;
    }
    --left[r];
    std::fill(asleep.begin(), asleep.end(), false);
  }
  return s;
}

// Per rank, the most pieces a schedule holds between F and B, F and W, B and W.
RankCaps capsOf(const Schedule& s) {
  const int ranks = static_cast<int>(s.actions.size());
  RankCaps c{std::vector<int>(ranks, 0), std::vector<int>(ranks, 0), std::vector<int>(ranks, 0)};
  for (int r = 0; r < ranks; ++r) {
    int f = 0, b = 0, w = 0;
    for (auto& a : s.actions[r]) {
      f += a.kind == ActionKind::Forward;
      b += a.kind == ActionKind::BackwardInput;
      w += a.kind == ActionKind::BackwardWeight;
      c.toB[r] = std::max(c.toB[r], f - b);
      c.toW[r] = std::max(c.toW[r], f - w);
      c.pendingW[r] = std::max(c.pendingW[r], b - w);
    }
  }
  return c;
}

bool noMoreThan(const std::vector<int>& a, const std::vector<int>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b.at(i)) return false;
  }
  return true;
}

// The zero-bubble schedule for these costs: list-scheduled with them, within
// the unit-cost schedule's pieces per rank (capsOf), and kept only when no
// stage holds more micro-batches than in the unit-cost one (with chunks, a
// rank's pieces may split differently over its stages) and it simulates
// faster than the unit-cost one under the same costs.
Schedule timedZeroBubble(const std::string& name, int p, int v, int m, const ScheduleCosts* costs) {
  auto unit = listScheduleZeroBubble(name, p, v, m);
  if (!costs) return unit;
  SLUICE_CHECK(static_cast<int>(costs->times.size()) == p * v, ScheduleError,
               name << ": " << costs->times.size() << " stage times for " << p * v << " stages");
  const auto caps = capsOf(unit);
  Schedule timed;
  try {
    timed = listScheduleZeroBubble(name, p, v, m, costs, &caps);
  } catch (const ScheduleError&) {
    return unit;  // these caps left the timed list scheduling stuck (never seen): the unit-cost order is valid
  }
  if (!noMoreThan(peakInFlight(timed), peakInFlight(unit)) ||
      !noMoreThan(peakWeightPending(timed), peakWeightPending(unit))) {
    return unit;
  }
  const double a = simulateStep(timed, costs->times, costs->comm), b = simulateStep(unit, costs->times, costs->comm);
  return a < b * (1 - 1e-9) ? timed : unit;
}

}  // namespace

Schedule makeZeroBubbleH1(int stages, int microBatches, const ScheduleCosts* costs) {
  checkDims(stages, microBatches);
  return timedZeroBubble("zb-h1", stages, 1, microBatches, costs);
}

Schedule makeInterleaved1F1B(int ranks, int chunks, int microBatches) {
  checkInterleaved("interleaved", ranks, chunks, microBatches);
  const int p = ranks, v = chunks, m = microBatches;
  const int stages = p * v, total = m * v;
  Schedule s{"interleaved", stages, m, std::vector<std::vector<Action>>(p), p};
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

Schedule makeInterleavedZeroBubble(int ranks, int chunks, int microBatches, const ScheduleCosts* costs) {
  checkInterleaved("interleaved-zb", ranks, chunks, microBatches);
  return timedZeroBubble("interleaved-zb", ranks, chunks, microBatches, costs);
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

bool interleavesStages(const std::string& name) {
  const auto* k = findScheduleKind(name);
  return k && k->interleaves;
}

bool fitsToStageTimes(const std::string& name) {
  const auto* k = findScheduleKind(name);
  return k && k->fitsStageTimes;
}

Schedule makeSchedule(const std::string& name, int stages, int microBatches, int chunks, const ScheduleCosts* costs) {
  const auto& kind = scheduleKind(name);
  SLUICE_CHECK(kind.interleaves || chunks == 1, ScheduleError,
               "schedule '" << name << "' runs one stage per rank; only the interleaved schedules take " << chunks
                            << " chunks");
  return kind.build(stages, chunks, microBatches, kind.fitsStageTimes ? costs : nullptr);
}

bool splitsBackward(const Schedule& schedule) {
  for (auto& stage : schedule.actions) {
    for (auto& a : stage) {
      if (a.kind == ActionKind::BackwardInput || a.kind == ActionKind::BackwardWeight) return true;
    }
  }
  return false;
}

double simulateStep(const Schedule& s, const std::vector<StageTimes>& times, double comm) {
  return simulateStepWithRefill(s, times, comm, RefillCosts{}).stepTime;
}

StepSimulation simulateStepWithRefill(const Schedule& s, const std::vector<StageTimes>& times, double comm,
                                      const RefillCosts& refill) {
  SLUICE_CHECK(static_cast<int>(times.size()) == s.stages, ScheduleError,
               "simulateStep: " << times.size() << " stage times for " << s.stages << " stages");
  const int ranks = static_cast<int>(s.actions.size());
  std::vector<size_t> pc(ranks, 0);
  std::vector<double> clock(ranks, 0);
  std::vector<double> busyUntil(ranks, 0);  // end of the rank's last compute action
  StepSimulation out;
  out.refillSeconds.assign(s.stages, 0);
  const bool charged = refill.charged();
  SLUICE_CHECK(!charged || static_cast<int>(refill.share.size()) == s.stages, ScheduleError,
               "simulateStep: refill shares for " << refill.share.size() << " stages, the schedule has " << s.stages);
  std::map<std::tuple<int, int, int>, double> sent;  // (from stage, kind, mb) -> time
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      for (; pc[r] < s.actions[r].size(); ++pc[r]) {
        const Action& a = s.actions[r][pc[r]];
        const auto& c = times.at(a.stage);
        if (a.kind == ActionKind::RecvActivation || a.kind == ActionKind::RecvGrad) {
          const bool act = a.kind == ActionKind::RecvActivation;
          auto it = sent.find({act ? a.stage - 1 : a.stage + 1,
                               static_cast<int>(act ? ActionKind::SendActivation : ActionKind::SendGrad), a.microBatch});
          if (it == sent.end()) break;
          clock[r] = std::max(clock[r], it->second + comm);
        } else if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGrad) {
          sent[{a.stage, static_cast<int>(a.kind), a.microBatch}] = clock[r];
        } else {
          const double t = a.kind == ActionKind::Forward           ? c.forward
                           : a.kind == ActionKind::Backward        ? c.backward
                           : a.kind == ActionKind::BackwardInput   ? c.backwardInput
                                                                   : c.backwardWeight;
          double extra = 0;
          if (charged) extra = refill.share[a.stage] * t * std::min(1.0, (clock[r] - busyUntil[r]) / refill.waitSeconds);
          clock[r] += t + extra;
          busyUntil[r] = clock[r];
          out.refillSeconds[a.stage] += extra;
        }
        progress = true;
      }
    }
  }
  double end = 0;
  for (int r = 0; r < ranks; ++r) {
    SLUICE_CHECK(pc[r] == s.actions[r].size(), ScheduleError, "simulateStep: schedule '" << s.name << "' deadlocks");
    end = std::max(end, clock[r]);
  }
  out.stepTime = end;
  return out;
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

std::string toString(const Schedule& s) {
  std::ostringstream os;
  const bool chunked = s.chunks() > 1;
  os << s.name << " (stages=" << s.stages << (chunked ? ", ranks=" + std::to_string(s.rankCount()) : "")
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
