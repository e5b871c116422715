#include "pipeline/Schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "core/Error.h"

namespace sluice::pipeline {
namespace {

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

void appendBackwardInput(std::vector<Action>& out, int stage, int stages, int mb) {
  if (stage < stages - 1) out.push_back({ActionKind::RecvGrad, mb, stage});
  out.push_back({ActionKind::BackwardInput, mb, stage});
  if (stage > 0) out.push_back({ActionKind::SendGrad, mb, stage});
}

void checkDims(int stages, int microBatches) {
  SLUICE_CHECK(stages >= 1, ScheduleError, "a schedule needs at least 1 stage (got " << stages << ")");
  SLUICE_CHECK(microBatches >= 1, ScheduleError, "a schedule needs at least 1 micro-batch (got " << microBatches << ")");
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

Schedule makeZeroBubbleH1(int stages, int microBatches) {
  checkDims(stages, microBatches);
  const int p = stages, m = microBatches;
  Schedule s{"zb-h1", p, m, std::vector<std::vector<Action>>(p)};
  // Ticks of unit length; an action run in tick t is done at t + 1 and its
  // message can be used from tick t + 1 on. -1: not run yet.
  std::vector<std::vector<int>> fDone(p, std::vector<int>(m, -1)), bDone(p, std::vector<int>(m, -1));
  std::vector<int> nextF(p, 0), nextB(p, 0), wDone(p, 0);
  std::vector<std::deque<int>> pendingW(p);
  auto done = [](int at, int t) { return at >= 0 && at <= t; };
  int left = 3 * p * m;
  for (int t = 0; left > 0; ++t) {
    SLUICE_CHECK(t <= 6 * p * m + 6 * p, ScheduleError, "zb-h1: list scheduling made no progress (p=" << p << ", m=" << m << ")");
    for (int st = 0; st < p; ++st) {
      auto& out = s.actions[st];
      const int b = nextB[st], f = nextF[st];
      const bool canB = b < f && done(st == p - 1 ? fDone[st][b] : bDone[st + 1][b], t);
      const bool canF = f < m && (st == 0 || done(fDone[st - 1][f], t)) && f - b < std::min(p - st, m) &&
                        f - wDone[st] < std::min(p, m);
      if (canB) {
        appendBackwardInput(out, st, p, b);
        bDone[st][b] = t + 1;
        pendingW[st].push_back(b);
        ++nextB[st];
      } else if (canF) {
        appendForward(out, st, p, f);
        fDone[st][f] = t + 1;
        ++nextF[st];
      } else if (!pendingW[st].empty()) {
        out.push_back({ActionKind::BackwardWeight, pendingW[st].front(), st});
        pendingW[st].pop_front();
        ++wDone[st];
      } else {
        continue;
      }
      --left;
    }
  }
  return s;
}

Schedule makeInterleaved1F1B(int ranks, int chunks, int microBatches) {
  checkDims(ranks, microBatches);
  const int p = ranks, v = chunks, m = microBatches;
  SLUICE_CHECK(v >= 1, ScheduleError, "interleaved: chunks per rank must be at least 1 (got " << v << ")");
  SLUICE_CHECK(m % p == 0, ScheduleError,
               "interleaved 1F1B takes micro-batches p at a time: pipeline.microbatches (" << m
                   << ") must be a multiple of pipeline.stages (" << p << ")");
  const int stages = p * v, total = m * v;
  Schedule s{"interleaved", stages, m, std::vector<std::vector<Action>>(p), p};
  // The k-th forward (backward) piece of a rank: micro-batches in groups of
  // p, each group through every chunk (backwards: from the last chunk down).
  auto microBatchOf = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forwardChunk = [&](int k) { return (k / p) % v; };
  auto backwardChunk = [&](int k) { return v - 1 - (k / p) % v; };
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    // With m == p there is no steady phase to overlap: all forwards first.
    const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
    auto forward = [&](int k) { appendForward(out, forwardChunk(k) * p + r, stages, microBatchOf(k)); };
    auto backward = [&](int k) { appendBackward(out, backwardChunk(k) * p + r, stages, microBatchOf(k)); };
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

const std::vector<std::string>& scheduleNames() {
  static const std::vector<std::string> names{"gpipe", "1f1b", "zb-h1", "interleaved"};
  return names;
}

Schedule makeSchedule(const std::string& name, int stages, int microBatches, int chunks) {
  if (name == "interleaved") return makeInterleaved1F1B(stages, chunks, microBatches);
  SLUICE_CHECK(chunks == 1, ScheduleError,
               "schedule '" << name << "' runs one stage per rank; only interleaved takes " << chunks << " chunks");
  if (name == "gpipe") return makeGPipe(stages, microBatches);
  if (name == "1f1b") return make1F1B(stages, microBatches);
  if (name == "zb-h1") return makeZeroBubbleH1(stages, microBatches);
  throw ScheduleError("unknown schedule '" + name + "' (choose gpipe, 1f1b, zb-h1 or interleaved)");
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
  SLUICE_CHECK(static_cast<int>(times.size()) == s.stages, ScheduleError,
               "simulateStep: " << times.size() << " stage times for " << s.stages << " stages");
  const int ranks = static_cast<int>(s.actions.size());
  std::vector<size_t> pc(ranks, 0);
  std::vector<double> clock(ranks, 0);
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
          clock[r] += a.kind == ActionKind::Forward          ? c.forward
                      : a.kind == ActionKind::Backward       ? c.backward
                      : a.kind == ActionKind::BackwardInput  ? c.backwardInput
                                                             : c.backwardWeight;
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
  return end;
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

}  // namespace sluice::pipeline
