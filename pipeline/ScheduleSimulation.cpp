#include "pipeline/ScheduleSimulation.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
  Ref from{-2, -2};  // the sender's last compute action before the send ({-1, -1}: none; -2: not sent)
};

// The sends so far, by (from stage, kind, micro-batch), in a flat table.
class SentBoard {
 public:
  explicit SentBoard(const Schedule& s) : microBatches_(s.microBatches), sent_(2 * s.stages * s.microBatches) {}
  void send(const Action& a, Sent m) { sent_.at(slot(a.stage, a.kind == ActionKind::SendActivation, a.microBatch)) = m; }
  // The message receive `a` waits for; nullptr: not sent yet.
  const Sent* find(const Action& a) const {
    const bool act = a.kind == ActionKind::RecvActivation;
    const auto& m = sent_.at(slot(act ? a.stage - 1 : a.stage + 1, act, a.microBatch));
    return m.from.first == kUnsent ? nullptr : &m;
  }

 private:
  static constexpr int kUnsent = -2;
  size_t slot(int stage, bool activation, int microBatch) const {
    return (static_cast<size_t>(stage) * 2 + (activation ? 1 : 0)) * microBatches_ + microBatch;
  }
  int microBatches_;
  std::vector<Sent> sent_;
};

// What a send carries for the critical path: the sender's last compute action
// (a send right after a wait carries what it waited for).
Ref sentFrom(const StepSimulation& out, Ref from) {
  while (from.first >= 0 && isReceive(out.ranks[from.first][from.second].action.kind)) {
    from = out.ranks[from.first][from.second].after;
  }
  return from;
}

// Note [refill after a wait]: what a compute action of `t` seconds on
// `stage` adds after its rank idled `idle` seconds (0 when not charged).
double refillExtra(const RefillCosts& refill, int stage, double t, double idle) {
  return refill.charged() ? refill.share[stage] * t * std::min(1.0, idle / refill.waitSeconds) : 0.0;
}

// The result before the first action, after checking the inputs match the schedule.
StepSimulation emptySimulation(const Schedule& s, const std::vector<StageTimes>& times, const RefillCosts& refill) {
  SLUICE_CHECK(static_cast<int>(times.size()) == s.stages, ScheduleError,
               "simulateStep: " << times.size() << " stage times for " << s.stages << " stages");
  SLUICE_CHECK(!refill.charged() || static_cast<int>(refill.share.size()) == s.stages, ScheduleError,
               "simulateStep: refill shares for " << refill.share.size() << " stages, the schedule has " << s.stages);
  StepSimulation out;
  out.refillSeconds.assign(s.stages, 0);
  out.ranks.resize(s.actions.size());
  out.busy.assign(s.actions.size(), 0);
  return out;
}

}  // namespace

double simulateStep(const Schedule& s, const std::vector<StageTimes>& times, double comm) {
  return simulateStepWithRefill(s, times, comm, RefillCosts{}).stepTime;
}

StepSimulation simulateStepWithRefill(const Schedule& s, const std::vector<StageTimes>& times, double comm,
                                      const RefillCosts& refill) {
  const int ranks = static_cast<int>(s.actions.size());
  std::vector<RankState> st(ranks);
  StepSimulation out = emptySimulation(s, times, refill);
  SentBoard sent(s);
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
          const Sent* m = sent.find(a);
          if (!m) break;
          const double arrival = m->time + comm;
          if (arrival > rs.clock) {
            record(r, a, rs.clock, arrival, m->from);
            rs.clock = arrival;
          }
        } else if (isSend(a.kind)) {
          sent.send(a, {rs.clock, sentFrom(out, rs.last)});
        } else {
          const double t = computeTime(a, times.at(a.stage));
          const double extra = refillExtra(refill, a.stage, t, rs.clock - rs.busyUntil);
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

double sharedRate(int busy, double cores) {
  if (busy <= cores) return 1.0;
  const double even = cores / busy;
  if (cores < 1 || cores != std::floor(cores)) return even;
  // c cores: h of them run L + 1 ranks, the other c - h run L; a rank is on
  // any of the n places alike and takes (ranks on its core) times its time.
  const int c = static_cast<int>(cores), low = busy / c, h = busy - c * low;
  const double meanSlowdown =
      (static_cast<double>(h) * (low + 1) * (low + 1) + static_cast<double>(c - h) * low * low) / busy;
  return 1.0 / meanSlowdown;
}

// Note [ranks sharing cores] (ScheduleSimulation.h): the ranks in time
// order. Between events (a compute action or a copy ends, a rank sees a
// message, a poll gives way to sleep) the n ranks computing, copying or
// polling each progress at sharedRate(n, cores); a rank that is not busy runs
// its sends and the receives it has seen at once, up to its next compute
// action or copy.
namespace {

struct SharedRank {
  size_t pc = 0;              // the next action
  bool computing = false;     // in actions[pc - 1]
  bool copying = false;       // copying in actions[pc - 1]'s message
  double left = 0, start = 0; // seconds of work left at full speed; when it started
  double busyUntil = 0;       // the end of its last compute action
  double waitingSince = -1;   // >= 0: blocked on a receive since then
  Ref last{-1, -1};
  Ref copyAfter{-1, -1};
  bool busy() const { return computing || copying; }
};

class SharedCores {
 public:
  SharedCores(const Schedule& s, const std::vector<StageTimes>& times, double comm, const RefillCosts& refill,
              double cores, const WaitPolicy& waits)
      : s_(s), times_(times), comm_(comm), refill_(refill), cores_(cores),
        waits_(waits), st_(s.actions.size()),
        out_(emptySimulation(s, times, refill)), sent_(s) {}

  StepSimulation run() {
    for (;;) {
      for (bool moved = true; moved;) {
        moved = false;
        for (size_t r = 0; r < st_.size(); ++r) moved = advance(static_cast<int>(r)) || moved;
      }
      const double speed = rate();  // constant until the next event
      const double next = nextEvent(speed);
      if (next == kNever) break;
      finishUpTo(next, speed);
      now_ = next;
    }
    for (size_t r = 0; r < st_.size(); ++r) {
      SLUICE_CHECK(st_[r].pc == s_.actions[r].size() && !st_[r].busy(), ScheduleError,
                   "simulateStep: " << scheduleTitle(s_) << " deadlocks");
    }
    out_.stepTime = now_;
    return std::move(out_);
  }

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  void record(int r, const Action& a, double start, double end, Ref after) {
    out_.ranks[r].push_back({a, start, end, after});
    st_[r].last = {r, static_cast<int>(out_.ranks[r].size()) - 1};
  }

  // When a rank that began waiting at `since` sees a message there at `at`:
  // at once while it polls, else at its first poll after a nap.
  double seen(double since, double at) const {
    if (at <= since + waits_.pollSeconds || waits_.firstNapSeconds <= 0) return std::max(since, at);
    double t = since + waits_.pollSeconds, nap = waits_.firstNapSeconds;
    while (t < at && nap < waits_.maxNapSeconds) {  // the naps that double
      t += nap;
      nap = std::min(waits_.maxNapSeconds, 2 * nap);
    }
    if (t < at) t += std::ceil((at - t) / nap) * nap;  // then every maxNapSeconds
    return t;
  }

  bool spinning(const SharedRank& rs) const {
    return rs.waitingSince >= 0 && !rs.busy() && now_ < rs.waitingSince + waits_.pollSeconds;
  }

  // Rank r's sends and arrived receives at now_, up to its next compute action (which starts).
  bool advance(int r) {
    auto& rs = st_[r];
    bool moved = false;
    for (; !rs.busy() && rs.pc < s_.actions[r].size(); ++rs.pc, moved = true) {
      const Action& a = s_.actions[r][rs.pc];
      if (isReceive(a.kind)) {
        const Sent* m = sent_.find(a);
        // The message is there for its receiver to copy as soon as it is sent.
        const bool there = m && m->time <= now_;
        if (!there || (rs.waitingSince >= 0 && seen(rs.waitingSince, m->time) > now_ + 1e-15)) {
          if (rs.waitingSince < 0) rs.waitingSince = now_;
          break;
        }
        const double at = m->time;
        if (comm_ > 0) {
          rs.copying = true;
          rs.left = comm_;
          rs.start = rs.waitingSince >= 0 ? rs.waitingSince : now_;
          rs.copyAfter = rs.waitingSince >= 0 && at > rs.waitingSince ? m->from : rs.last;  // what held it up
        } else if (rs.waitingSince >= 0 && at > rs.waitingSince) {
          record(r, a, rs.waitingSince, now_, m->from);
        }
        rs.waitingSince = -1;
      } else if (isSend(a.kind)) {
        sent_.send(a, {now_, sentFrom(out_, rs.last)});
      } else {
        const double t = computeTime(a, times_.at(a.stage));
        const double extra = refillExtra(refill_, a.stage, t, now_ - rs.busyUntil);
        out_.refillSeconds[a.stage] += extra;
        rs.computing = true;
        rs.left = t + extra;
        rs.start = now_;
      }
    }
    return moved;
  }

  double rate() const {
    const auto n = std::count_if(st_.begin(), st_.end(), [&](const SharedRank& rs) { return rs.busy() || spinning(rs); });
    return n == 0 ? 0.0 : sharedRate(static_cast<int>(n), cores_);
  }

  // The next event: a compute action or a copy ends, a poll gives way to
  // sleep, or a blocked rank sees its message.
  double nextEvent(double speed) const {
    double next = kNever;
    for (size_t r = 0; r < st_.size(); ++r) {
      const auto& rs = st_[r];
      if (rs.busy()) {
        next = std::min(next, now_ + rs.left / speed);
      } else if (rs.pc < s_.actions[r].size()) {
        if (spinning(rs)) next = std::min(next, rs.waitingSince + waits_.pollSeconds);
        if (const Sent* m = sent_.find(s_.actions[r][rs.pc])) {
          next = std::min(next, std::max(now_, rs.waitingSince >= 0 ? seen(rs.waitingSince, m->time) : m->time));
        }
      }
    }
    return next;
  }

  // Every computing rank progresses to `next`; those whose action ends there finish it.
  void finishUpTo(double next, double speed) {
    const double slack = 1e-12 * std::max(1.0, next);
    for (size_t r = 0; r < st_.size(); ++r) {
      auto& rs = st_[r];
      if (!rs.busy()) continue;
      if (now_ + rs.left / speed <= next + slack) {
        if (rs.copying) {
          record(static_cast<int>(r), s_.actions[r][rs.pc - 1], rs.start, next, rs.copyAfter);
          rs.copying = false;
          continue;
        }
        record(static_cast<int>(r), s_.actions[r][rs.pc - 1], rs.start, next, rs.last);
        out_.busy[r] += next - rs.start;
        rs.busyUntil = next;
        rs.computing = false;
      } else {
        rs.left -= speed * (next - now_);
      }
    }
  }

  const Schedule& s_;
  const std::vector<StageTimes>& times_;
  const double comm_;
  const RefillCosts& refill_;
  const double cores_;
  const WaitPolicy waits_;
  std::vector<SharedRank> st_;
  StepSimulation out_;
  SentBoard sent_;
  double now_ = 0;
};

}  // namespace

StepSimulation simulateStepOnCores(const Schedule& s, const std::vector<StageTimes>& times, double comm,
                                   const RefillCosts& refill, double cores, const WaitPolicy& waits) {
  if (!(cores > 0)) return simulateStepWithRefill(s, times, comm, refill);
  return SharedCores(s, times, comm, refill, cores, waits).run();
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
