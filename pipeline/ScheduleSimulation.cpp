#include "pipeline/ScheduleSimulation.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/Error.h"

namespace sluice::pipeline {
namespace {

using Ref = std::pair<int, int>;  // (rank, interval index)

double computeTime(const Action& a, const StageTimes& c) {
  switch (a.kind) {
    case ActionKind::Forward: return c.forward;
    case ActionKind::Backward: return c.backward;
    case ActionKind::BackwardInput: return c.backwardInput;
    default: return c.backwardWeight;
  }
}

bool isReceive(ActionKind k) { return k == ActionKind::RecvActivation || k == ActionKind::RecvGrad; }
bool isSend(ActionKind k) { return k == ActionKind::SendActivation || k == ActionKind::SendGrad; }

// One rank's progress through its actions.
struct RankState {
  size_t pc = 0;
  double clock = 0, busyUntil = 0;
  Ref last{-1, -1};  // the rank's latest interval
};

struct Sent {
  double time = 0;
  Ref from{-1, -1};  // the sender's last compute action before the send
};

}  // namespace

double simulateStep(const Schedule& s, const std::vector<StageTimes>& times, double comm) {
  return simulateStepWithRefill(s, times, comm, RefillCosts{}).stepTime;
}

StepSimulation simulateStepWithRefill(const Schedule& s, const std::vector<StageTimes>& times, double comm,
                                      const RefillCosts& refill) {
  SLUICE_CHECK(static_cast<int>(times.size()) == s.stages, ScheduleError,
               "simulateStep: " << times.size() << " stage times for " << s.stages << " stages");
  const int ranks = static_cast<int>(s.actions.size());
  const bool charged = refill.charged();
  SLUICE_CHECK(!charged || static_cast<int>(refill.share.size()) == s.stages, ScheduleError,
               "simulateStep: refill shares for " << refill.share.size() << " stages, the schedule has " << s.stages);
  std::vector<RankState> st(ranks);
  StepSimulation out;
  out.refillSeconds.assign(s.stages, 0);
  out.ranks.resize(ranks);
  out.busy.assign(ranks, 0);
  std::map<std::tuple<int, int, int>, Sent> sent;  // (from stage, kind, mb)
  auto record = [&](int r, const Action& a, double start, double end, Ref after) {
    out.ranks[r].push_back({a, start, end, after});
    st[r].last = {r, static_cast<int>(out.ranks[r].size()) - 1};
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      auto& rs = st[r];
      for (; rs.pc < s.actions[r].size(); ++rs.pc) {
        const Action& a = s.actions[r][rs.pc];
        if (isReceive(a.kind)) {
          const bool act = a.kind == ActionKind::RecvActivation;
          auto it = sent.find({act ? a.stage - 1 : a.stage + 1,
                               static_cast<int>(act ? ActionKind::SendActivation : ActionKind::SendGrad), a.microBatch});
          if (it == sent.end()) break;
          const double arrival = it->second.time + comm;
          if (arrival > rs.clock) {
            record(r, a, rs.clock, arrival, it->second.from);
            rs.clock = arrival;
          }
        } else if (isSend(a.kind)) {
          Ref from = rs.last;
          while (from.first >= 0 && isReceive(out.ranks[from.first][from.second].action.kind)) {
            from = out.ranks[from.first][from.second].after;  // a send right after a wait carries what it waited for
          }
          sent[{a.stage, static_cast<int>(a.kind), a.microBatch}] = {rs.clock, from};
        } else {
          const double t = computeTime(a, times.at(a.stage));
          double extra = 0;
          if (charged) extra = refill.share[a.stage] * t * std::min(1.0, (rs.clock - rs.busyUntil) / refill.waitSeconds);
          record(r, a, rs.clock, rs.clock + t + extra, rs.last);
          rs.clock += t + extra;
          rs.busyUntil = rs.clock;
          out.busy[r] += t + extra;
          out.refillSeconds[a.stage] += extra;
        }
        progress = true;
      }
    }
  }
  for (int r = 0; r < ranks; ++r) {
    SLUICE_CHECK(st[r].pc == s.actions[r].size(), ScheduleError, "simulateStep: " << scheduleTitle(s) << " deadlocks");
    out.stepTime = std::max(out.stepTime, st[r].clock);
  }
  return out;
}

double bubbleRate(const StepSimulation& sim) {
  if (sim.stepTime <= 0 || sim.busy.empty()) return 0;
  const double busy = *std::max_element(sim.busy.begin(), sim.busy.end());
  return (sim.stepTime - busy) / sim.stepTime;
}

std::vector<std::pair<int, SimulatedAction>> criticalPath(const StepSimulation& sim) {
  Ref at{-1, -1};
  double end = -1;
  for (size_t r = 0; r < sim.ranks.size(); ++r) {
    if (!sim.ranks[r].empty() && sim.ranks[r].back().end > end) {
      end = sim.ranks[r].back().end;
      at = {static_cast<int>(r), static_cast<int>(sim.ranks[r].size()) - 1};
    }
  }
  std::vector<std::pair<int, SimulatedAction>> path;
  while (at.first >= 0) {
    const auto& x = sim.ranks[at.first][at.second];
    path.push_back({at.first, x});
    at = x.after;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<double> peakActivationMicroBatches(const Schedule& s) {
  std::vector<double> out;
  const double chunks = s.chunks();
  for (const auto& actions : s.actions) {
    int held = 0, peak = 0;
    for (const auto& a : actions) {
      if (a.kind == ActionKind::Forward) peak = std::max(peak, ++held);
      if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight) --held;
    }
    out.push_back(peak / chunks);
  }
  return out;
}

std::pair<std::string, std::string> traceNameOf(const Action& a, bool chunked) {
  const std::string mb = std::to_string(a.microBatch) + (chunked ? " s" + std::to_string(a.stage) : "");
  switch (a.kind) {
    case ActionKind::Forward: return {"F" + mb, "compute"};
    case ActionKind::Backward: return {"B" + mb, "compute"};
    case ActionKind::RecvActivation: return {"recv activation " + mb, "recv"};
    case ActionKind::RecvGrad: return {"recv gradient " + mb, "recv"};
    case ActionKind::SendActivation: return {"send activation " + mb, "send"};
    case ActionKind::SendGrad: return {"send gradient " + mb, "send"};
    case ActionKind::BackwardInput: return {"Bi" + mb, "compute"};
    case ActionKind::BackwardWeight: return {"W" + mb, "compute"};
  }
  return {"?", "compute"};
}

}  // namespace sluice::pipeline
