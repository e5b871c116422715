// checkSchedule(): see Schedule.h for the rules it enforces.
#include <set>
#include <tuple>
#include <sstream>

#include "core/Error.h"
#include "pipeline/Schedule.h"

namespace sluice::pipeline {
namespace {

std::string where(int stage, size_t pos, const Action& a) {
  return "stage " + std::to_string(stage) + ", action " + std::to_string(pos) + " (" + toString(a) + ")";
}

// One action of stage `st` against what the stage ran before it (`done`: (kind, mb)): what it needs has run, and
// the first and last stages do not communicate past the pipeline's ends.
void checkActionOrder(int st, size_t i, const Action& a, bool first, bool last,
                      const std::set<std::pair<int, int>>& done) {
  auto seen = [&](ActionKind k, int mb) { return done.count({static_cast<int>(k), mb}) > 0; };
  switch (a.kind) {
    case ActionKind::RecvActivation:
      SLUICE_CHECK(!first, ScheduleError, where(st, i, a) << ": the first stage receives no activations");
      break;
    case ActionKind::Forward:
      SLUICE_CHECK(first || seen(ActionKind::RecvActivation, a.microBatch), ScheduleError,
                   where(st, i, a) << ": forward before its activation was received");
      break;
    case ActionKind::SendActivation:
      SLUICE_CHECK(!last, ScheduleError, where(st, i, a) << ": the last stage sends no activations");
      SLUICE_CHECK(seen(ActionKind::Forward, a.microBatch), ScheduleError,
                   where(st, i, a) << ": activation sent before its forward");
      break;
    case ActionKind::RecvGrad:
      SLUICE_CHECK(!last, ScheduleError, where(st, i, a) << ": the last stage receives no gradients");
      break;
    case ActionKind::Backward:
    case ActionKind::BackwardInput:
      SLUICE_CHECK(seen(ActionKind::Forward, a.microBatch), ScheduleError,
                   where(st, i, a) << ": backward before its forward");
      SLUICE_CHECK(last || seen(ActionKind::RecvGrad, a.microBatch), ScheduleError,
                   where(st, i, a) << ": backward before its gradient was received");
      SLUICE_CHECK(!seen(a.kind == ActionKind::Backward ? ActionKind::BackwardInput : ActionKind::Backward,
                         a.microBatch),
                   ScheduleError, where(st, i, a) << ": micro-batch backwarded both whole and split");
      break;
    case ActionKind::BackwardWeight:
      SLUICE_CHECK(seen(ActionKind::BackwardInput, a.microBatch), ScheduleError,
                   where(st, i, a) << ": weight gradient before its input gradient (Bi)");
      break;
    case ActionKind::SendGrad:
      SLUICE_CHECK(!first, ScheduleError, where(st, i, a) << ": the first stage sends no gradients");
      SLUICE_CHECK(seen(ActionKind::Backward, a.microBatch) || seen(ActionKind::BackwardInput, a.microBatch),
                   ScheduleError, where(st, i, a) << ": gradient sent before its backward");
      break;
  }
}

// Per-stage rules: each action exactly once and in a legal order.
void checkStage(const Schedule& s, int st) {
  const int p = s.stages, m = s.microBatches;
  const bool first = st == 0, last = st == p - 1;
  std::set<std::pair<int, int>> done;  // (kind, mb)
  auto seen = [&](ActionKind k, int mb) { return done.count({static_cast<int>(k), mb}) > 0; };
  const auto actions = s.stageActions(st);
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    SLUICE_CHECK(a.microBatch >= 0 && a.microBatch < m, ScheduleError,
                 where(st, i, a) << ": micro-batch outside [0, " << m << ")");
    SLUICE_CHECK(!seen(a.kind, a.microBatch), ScheduleError, where(st, i, a) << ": repeated");
    checkActionOrder(st, i, a, first, last, done);
    done.insert({static_cast<int>(a.kind), a.microBatch});
  }
  for (int mb = 0; mb < m; ++mb) {
    auto need = [&](ActionKind k, bool required) {
      SLUICE_CHECK(!required || seen(k, mb), ScheduleError,
                   "stage " << st << " never runs " << toString(Action{k, mb}));
    };
    need(ActionKind::Forward, true);
    const bool split = seen(ActionKind::BackwardInput, mb);
    need(ActionKind::Backward, !split);
    need(ActionKind::BackwardWeight, split);
    need(ActionKind::RecvActivation, !first);
    need(ActionKind::SendGrad, !first);
    need(ActionKind::SendActivation, !last);
    need(ActionKind::RecvGrad, !last);
  }
}

// Runs all ranks: a receive proceeds once the peer stage executed the
// matching send; sends never block. No progress with work left means deadlock.
void checkProgress(const Schedule& s) {
  const int ranks = static_cast<int>(s.actions.size());
  std::vector<size_t> pc(ranks, 0);
  std::set<std::tuple<int, int, int>> sent;  // (stage, kind, mb) of executed sends
  auto finished = [&] {
    for (int r = 0; r < ranks; ++r) {
      if (pc[r] < s.actions[r].size()) return false;
    }
    return true;
  };
  while (!finished()) {
    bool progress = false;
    for (int r = 0; r < ranks; ++r) {
      while (pc[r] < s.actions[r].size()) {
        const Action& a = s.actions[r][pc[r]];
        if (a.kind == ActionKind::RecvActivation &&
            !sent.count({a.stage - 1, static_cast<int>(ActionKind::SendActivation), a.microBatch})) {
          break;
        }
        if (a.kind == ActionKind::RecvGrad &&
            !sent.count({a.stage + 1, static_cast<int>(ActionKind::SendGrad), a.microBatch})) {
          break;
        }
        if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGrad) {
          sent.insert({a.stage, static_cast<int>(a.kind), a.microBatch});
        }
        ++pc[r];
        progress = true;
      }
    }
    if (!progress) {
      std::ostringstream os;
      os << scheduleTitle(s) << " deadlocks; blocked at:";
      for (int r = 0; r < ranks; ++r) {
        if (pc[r] < s.actions[r].size()) {
          const Action& a = s.actions[r][pc[r]];
          os << " " << where(a.stage, pc[r], a) << (ranks < s.stages ? " on rank " + std::to_string(r) : "") << ";";
        }
      }
      throw ScheduleError(os.str());
    }
  }
}

}  // namespace

void checkSchedule(const Schedule& s, const std::vector<int>& inFlightLimit) {
  SLUICE_CHECK(s.stages >= 1 && s.microBatches >= 1, ScheduleError,
               scheduleTitle(s) << " has " << s.stages << " stages and " << s.microBatches << " micro-batches");
  const int ranks = s.rankCount();
  SLUICE_CHECK(ranks >= 1 && s.stages % ranks == 0, ScheduleError,
               scheduleTitle(s) << ": " << s.stages << " stages do not spread evenly over " << ranks << " ranks");
  SLUICE_CHECK(static_cast<int>(s.actions.size()) == ranks, ScheduleError,
               scheduleTitle(s) << " lists actions for " << s.actions.size() << " ranks, expected " << ranks);
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      SLUICE_CHECK(a.stage >= 0 && a.stage < s.stages && s.rankOf(a.stage) == r, ScheduleError,
                   "rank " << r << ", action " << i << " (" << toString(a) << ") names stage " << a.stage
                           << ", which rank " << r << " does not host");
    }
  }
  for (int st = 0; st < s.stages; ++st) checkStage(s, st);
  checkProgress(s);
  if (inFlightLimit.empty()) return;
  SLUICE_CHECK(static_cast<int>(inFlightLimit.size()) == s.stages, ScheduleError,
               scheduleTitle(s) << ": " << inFlightLimit.size() << " in-flight limits for " << s.stages << " stages");
  auto peak = peakInFlight(s);
  for (int st = 0; st < s.stages; ++st) {
    SLUICE_CHECK(peak[st] <= inFlightLimit[st], ScheduleError,
                 scheduleTitle(s) << ": stage " << st << " holds " << peak[st]
                              << " micro-batches' activations at once, more than its limit " << inFlightLimit[st]);
  }
}

}  // namespace sluice::pipeline
