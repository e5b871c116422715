// The zero-bubble schedules (Schedule.h): zb-h1, interleaved-zb and zbv,
// list-scheduled in time (zb-h1 without costs: the paper's order, by hand).
#include <algorithm>
#include <deque>
#include <functional>
#include <limits>

#include "core/Error.h"
#include "pipeline/ScheduleSimulation.h"
#include "pipeline/ScheduleParts.h"

namespace sluice::pipeline {

using detail::appendBackwardInput;
using detail::checkDims;
using detail::checkInterleaved;
using detail::PieceOrder;

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
  std::vector<int> lowerToW;            // per rank, F..W pieces of its lowest stage (ZBV's chunk 0)
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

// The list scheduler of every zero-bubble schedule (zb-h1 and
// interleaved-zb by listScheduleZeroBubble, zbv by listScheduleV; their
// Progress holds the piece rules): the rank with the earliest clock among
// those with pieces left and not asleep runs its next piece
// (Progress::runNext(r, its actions): false when it cannot, and it then
// waits for an input on its way or sleeps); after a piece every rank wakes.
// `deadlock` names the schedule when every rank sleeps with pieces left.
template <class Progress>
void runListSchedule(Progress& prog, Schedule& s, const std::string& deadlock) {
  const int p = static_cast<int>(s.actions.size());
  for (;;) {
    const int r = nextRank(prog.left, prog.asleep, prog.clock);
    if (r < 0) {
      for (int q = 0; q < p; ++q) SLUICE_CHECK(prog.left[q] == 0, ScheduleError, deadlock);
      break;
    }
    if (!prog.runNext(r, s.actions[r])) continue;
    --prog.left[r];
    std::fill(prog.asleep.begin(), prog.asleep.end(), false);
  }
}

// Rank r's next B and next F in its piece order (listScheduleZeroBubble),
// whether it may run them, and when their inputs arrive (-1: not sent yet,
// or no such piece).
struct NextPieces {
  double bInput = -1, fInput = -1;
  int bStage = 0, bMb = 0, fStage = 0, fMb = 0;
  bool bRoom = false, fRoom = false;
};

// The zero-bubble list scheduler's progress (listScheduleZeroBubble), and
// one rank's decision at its clock.
struct ZeroBubbleProgress {
  ZeroBubbleProgress(const PieceOrder& order, const PieceLimits& limits, const PieceCosts& cost, double comm, int p,
                     int stages, int m, int total)
      : order(order), limits(limits), cost(cost), comm(comm), stages(stages), total(total),
        fEnd(stages, std::vector<double>(m, -1)), bEnd(stages, std::vector<double>(m, -1)), nextF(p, 0), nextB(p, 0),
        wDone(p, 0), left(p, 3 * total), clock(p, 0), asleep(p, false), pendingW(p) {}

  bool runNext(int r, std::vector<Action>& out) {
    return runNextPiece(r, nextPieces(r, order, limits, stages, total, comm), out, stages, cost);
  }

  NextPieces nextPieces(int r, const PieceOrder& order, const PieceLimits& limits, int stages, int total,
                        double comm) const;
  bool runNextPiece(int r, const NextPieces& n, std::vector<Action>& out, int stages, const PieceCosts& cost);

  const PieceOrder& order;
  const PieceLimits& limits;
  const PieceCosts& cost;
  const double comm;
  const int stages, total;
  // Finish times; -1: not scheduled yet.
  std::vector<std::vector<double>> fEnd, bEnd;
  std::vector<int> nextF, nextB, wDone, left;
  std::vector<double> clock;
  std::vector<bool> asleep;  // waiting for an input nobody has scheduled yet
  std::vector<std::deque<std::pair<int, int>>> pendingW;  // (stage, mb), oldest first
};

NextPieces ZeroBubbleProgress::nextPieces(int r, const PieceOrder& order, const PieceLimits& limits, int stages,
                                          int total, double comm) const {
  // When an input sent at `at` (-1: not yet) is there.
  auto arrival = [&](double at) { return at < 0 ? -1.0 : at + comm; };
  NextPieces n;
  n.bRoom = static_cast<int>(pendingW[r].size()) < limits.pendingW(r);
  if (nextB[r] < nextF[r]) {
    n.bStage = order.backwardStage(nextB[r], r);
    n.bMb = order.microBatchOf(nextB[r]);
    // The last stage's B follows its own F; the others wait for the next stage's gradient.
    n.bInput = n.bStage == stages - 1 ? fEnd[n.bStage][n.bMb] : arrival(bEnd[n.bStage + 1][n.bMb]);
  }
  n.fRoom = nextF[r] < total && nextF[r] - nextB[r] < limits.toB(r) && nextF[r] - wDone[r] < limits.toW(r);
  if (n.fRoom) {
    n.fStage = order.forwardStage(nextF[r], r);
    n.fMb = order.microBatchOf(nextF[r]);
    n.fInput = n.fStage == 0 ? 0.0 : arrival(fEnd[n.fStage - 1][n.fMb]);
  }
  return n;
}

// Runs rank r's B if its gradient is there (and Ws have room), else its F if
// its input is there, else its oldest pending W. False when none can: the
// rank then waits for an input on its way, or sleeps.
bool ZeroBubbleProgress::runNextPiece(int r, const NextPieces& n, std::vector<Action>& out, int stages,
                                      const PieceCosts& cost) {
  auto arrived = [](double at, double t) { return at >= 0 && at <= t; };
  const double t = clock[r];
  if (n.bRoom && arrived(n.bInput, t)) {
    appendBackwardInput(out, n.bStage, stages, n.bMb);
    bEnd[n.bStage][n.bMb] = clock[r] += cost.backwardInput(n.bStage);
    pendingW[r].push_back({n.bStage, n.bMb});
    ++nextB[r];
  } else if (n.fRoom && arrived(n.fInput, t)) {
    appendForward(out, n.fStage, stages, n.fMb);
    fEnd[n.fStage][n.fMb] = clock[r] += cost.forward(n.fStage);
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
    if (n.bInput > t) next = std::min(next, n.bInput);
    if (n.fRoom && n.fInput > t) next = std::min(next, n.fInput);
    if (next < std::numeric_limits<double>::infinity()) {
      clock[r] = next;
    } else {
      asleep[r] = true;
    }
    return false;
  }
  return true;
}

Schedule listScheduleZeroBubble(const std::string& what, int p, int v, int m, const ScheduleCosts* costs = nullptr,
                                const RankCaps* caps = nullptr) {
  const int stages = p * v, total = m * v;
  Schedule s{"", stages, m, std::vector<std::vector<Action>>(p), v > 1 ? p : 0};
  const PieceOrder order{p, v, m};
  const PieceLimits limits{order, caps, p, v, m};
  const PieceCosts cost{costs};
  const double comm = costs ? costs->comm : 0.0;
  ZeroBubbleProgress prog(order, limits, cost, comm, p, stages, m, total);
  runListSchedule(prog, s,
                  what + ": list scheduling deadlocked (p=" + std::to_string(p) + ", v=" + std::to_string(v) +
                      ", m=" + std::to_string(m) + ")");
  return s;
}

// Rank r's pick at its clock (listScheduleV): the ready B of the older
// micro-batch and the first ready F within memory (-1: none), and the
// earliest input still on its way.
struct ReadyPieces {
  int bStage = -1, fStage = -1;
  double next = std::numeric_limits<double>::infinity();  // the earliest input still on its way
};

// ZBV's list scheduler's progress (listScheduleV), and one rank's decision at
// its clock.
struct ZbvProgress {
  ZbvProgress(const PieceCosts& cost, double comm, const RankCaps* caps, int p, int stages, int m)
      : cost(cost), comm(comm), caps(caps), p(p), stages(stages), m(m), fEnd(stages, std::vector<double>(m, -1)),
        bEnd(stages, std::vector<double>(m, -1)), nextF(stages, 0), nextB(stages, 0), held(p, 0), lowerHeld(p, 0),
        left(p, 6 * m), clock(p, 0), asleep(p, false), pendingW(p) {}

  bool runNext(int r, std::vector<Action>& out) {
    return runReadyPiece(r, readyPieces(r, p, m, comm, caps), out, stages, cost);
  }

  ReadyPieces readyPieces(int r, int p, int m, double comm, const RankCaps* caps) const;
  bool runReadyPiece(int r, const ReadyPieces& ready, std::vector<Action>& out, int stages, const PieceCosts& cost);

  const PieceCosts& cost;
  const double comm;
  const RankCaps* caps;
  const int p, stages, m;
  std::vector<std::vector<double>> fEnd, bEnd;
  std::vector<int> nextF, nextB;
  std::vector<int> held, lowerHeld, left;  // pieces between F and W; of them on c0
  std::vector<double> clock;
  std::vector<bool> asleep;
  std::vector<std::deque<std::pair<int, int>>> pendingW;
};

ReadyPieces ZbvProgress::readyPieces(int r, int p, int m, double comm, const RankCaps* caps) const {
  const int stages = 2 * p;
  // Per rank: pieces between F and W, of them on c0, and pieces awaiting W.
  auto fits = [&](int r, int st) {
    return held[r] < (caps ? caps->toW[r] : 2 * p) && (st != r || lowerHeld[r] < (caps ? caps->lowerToW[r] : 2 * p - 1 - r));
  };
  auto pendingCap = [&](int r) { return caps ? caps->pendingW[r] : 2 * m; };
  auto arrival = [&](double at) { return at < 0 ? -1.0 : at + comm; };
  auto arrived = [](double at, double t) { return at >= 0 && at <= t; };
  const double t = clock[r];
  const int mine[2] = {2 * p - 1 - r, r};  // c1 first
  // The ready B of the older micro-batch, and the first ready F within memory.
  ReadyPieces ready;
  const bool bRoom = static_cast<int>(pendingW[r].size()) < pendingCap(r);
  for (int st : mine) {
    if (nextB[st] < nextF[st]) {
      const int mb = nextB[st];
      const double in = st == stages - 1 ? fEnd[st][mb] : arrival(bEnd[st + 1][mb]);
      if (bRoom && arrived(in, t)) {
        if (ready.bStage < 0 || mb < nextB[ready.bStage]) ready.bStage = st;
      } else if (in > t) {
        ready.next = std::min(ready.next, in);
      }
    }
    if (nextF[st] < m && fits(r, st)) {
      const double in = st == 0 ? 0.0 : arrival(fEnd[st - 1][nextF[st]]);
      if (arrived(in, t)) {
        if (ready.fStage < 0) ready.fStage = st;
      } else if (in > t) {
        ready.next = std::min(ready.next, in);
      }
    }
  }
  return ready;
}

// Runs rank r's ready B, else its ready F, else its oldest pending W. False
// when none can: the rank then waits for the earliest input on its way, or
// sleeps.
bool ZbvProgress::runReadyPiece(int r, const ReadyPieces& ready, std::vector<Action>& out, int stages,
                                const PieceCosts& cost) {
  if (ready.bStage >= 0) {
    const int mb = nextB[ready.bStage]++;
    appendBackwardInput(out, ready.bStage, stages, mb);
    bEnd[ready.bStage][mb] = clock[r] += cost.backwardInput(ready.bStage);
    pendingW[r].push_back({ready.bStage, mb});
  } else if (ready.fStage >= 0) {
    const int mb = nextF[ready.fStage]++;
    appendForward(out, ready.fStage, stages, mb);
    fEnd[ready.fStage][mb] = clock[r] += cost.forward(ready.fStage);
    ++held[r];
    lowerHeld[r] += ready.fStage == r;
  } else if (!pendingW[r].empty()) {
    auto [st, mb] = pendingW[r].front();
    out.push_back({ActionKind::BackwardWeight, mb, st});
    clock[r] += cost.backwardWeight(st);
    pendingW[r].pop_front();
    --held[r];
    lowerHeld[r] -= st == r;
  } else {
    if (ready.next < std::numeric_limits<double>::infinity()) clock[r] = ready.next;
    asleep[r] = ready.next == std::numeric_limits<double>::infinity();
    return false;
  }
  return true;
}

// ZBV's list scheduling (Schedule.h): rank r hosts c0 = r and c1 = 2p - 1 - r,
// each stage runs its micro-batches' F and B in order, and a free rank takes
// the older ready B, else a ready F (c1 first) within memory, else its oldest
// pending W, else waits. Memory (unit costs): 2p pieces between F and W, of
// which 2p - 1 - r on c0; with caps, those of the unit-cost schedule.
Schedule listScheduleV(const std::string& what, int p, int m, const ScheduleCosts* costs = nullptr,
                       const RankCaps* caps = nullptr) {
  const int stages = 2 * p;
  Schedule s{"", stages, m, std::vector<std::vector<Action>>(p), p, true};
  const PieceCosts cost{costs};
  const double comm = costs ? costs->comm : 0.0;
  ZbvProgress prog(cost, comm, caps, p, stages, m);
  runListSchedule(prog, s,
                  what + ": list scheduling deadlocked (p=" + std::to_string(p) + ", m=" + std::to_string(m) + ")");
  return s;
}

// Per rank, the most pieces a schedule holds between F and B, F and W, B and W.
RankCaps capsOf(const Schedule& s) {
  const int ranks = static_cast<int>(s.actions.size());
  RankCaps c{std::vector<int>(ranks, 0), std::vector<int>(ranks, 0), std::vector<int>(ranks, 0),
             std::vector<int>(ranks, 0)};
  for (int r = 0; r < ranks; ++r) {
    const int lowest = s.placement().stagesOf(r).front();
    int f = 0, b = 0, w = 0, lower = 0;
    for (auto& a : s.actions[r]) {
      f += a.kind == ActionKind::Forward;
      b += a.kind == ActionKind::BackwardInput;
      w += a.kind == ActionKind::BackwardWeight;
      if (a.stage == lowest) lower += a.kind == ActionKind::Forward ? 1 : a.kind == ActionKind::BackwardWeight ? -1 : 0;
      c.toB[r] = std::max(c.toB[r], f - b);
      c.toW[r] = std::max(c.toW[r], f - w);
      c.pendingW[r] = std::max(c.pendingW[r], b - w);
      c.lowerToW[r] = std::max(c.lowerToW[r], lower);
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
// A list scheduler: unit costs and no caps, or these costs within these caps.
using ListScheduler = std::function<Schedule(const ScheduleCosts*, const RankCaps*)>;

Schedule timedZeroBubble(const std::string& what, int stages, const ListScheduler& build, const ScheduleCosts* costs) {
  auto unit = build(nullptr, nullptr);
  if (!costs) return unit;
  SLUICE_CHECK(static_cast<int>(costs->times.size()) == stages, ScheduleError,
               what << ": " << costs->times.size() << " stage times for " << stages << " stages");
  const auto caps = capsOf(unit);
  Schedule timed;
  try {
    timed = build(costs, &caps);
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

Schedule timedZeroBubble(const std::string& what, int p, int v, int m, const ScheduleCosts* costs) {
  return timedZeroBubble(
      what, p * v,
      [&](const ScheduleCosts* c, const RankCaps* caps) { return listScheduleZeroBubble(what, p, v, m, c, caps); },
      costs);
}

// ZB-H1 in Qi et al.'s order (Schedule.h): stage s runs min(p - s, m)
// forwards, then per micro-batch j its B, the W of micro-batch j - s and its
// next forward, then the Ws left.
Schedule handOrderedZeroBubbleH1(int p, int m) {
  Schedule s{"", p, m, std::vector<std::vector<Action>>(p)};
  for (int st = 0; st < p; ++st) {
    auto& out = s.actions[st];
    const int warmup = std::min(p - st, m);
    int nextW = 0;
    for (int mb = 0; mb < warmup; ++mb) appendForward(out, st, p, mb);
    for (int mb = 0; mb < m; ++mb) {
      appendBackwardInput(out, st, p, mb);
      if (mb >= st) out.push_back({ActionKind::BackwardWeight, nextW++, st});
      if (mb + warmup < m) appendForward(out, st, p, mb + warmup);
    }
    for (; nextW < m; ++nextW) out.push_back({ActionKind::BackwardWeight, nextW, st});
  }
  return s;
}

}  // namespace

Schedule makeZeroBubbleH1(int stages, int microBatches, const ScheduleCosts* costs, const std::string& what) {
  checkDims(stages, microBatches);
  return timedZeroBubble(
      what, stages,
      [&](const ScheduleCosts* c, const RankCaps* caps) {
        return c ? listScheduleZeroBubble(what, stages, 1, microBatches, c, caps)
                 : handOrderedZeroBubbleH1(stages, microBatches);
      },
      costs);
}

Schedule makeInterleavedZeroBubble(int ranks, int chunks, int microBatches, const ScheduleCosts* costs,
                                   const std::string& what) {
  checkInterleaved(what, ranks, chunks, microBatches);
  return timedZeroBubble(what, ranks, chunks, microBatches, costs);
}

Schedule makeZeroBubbleV(int ranks, int microBatches, const ScheduleCosts* costs, const std::string& what) {
  checkDims(ranks, microBatches);
  return timedZeroBubble(
      what, 2 * ranks,
      [&](const ScheduleCosts* c, const RankCaps* caps) { return listScheduleV(what, ranks, microBatches, c, caps); },
      costs);
}

}  // namespace sluice::pipeline
