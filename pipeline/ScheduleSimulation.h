// pipeline::ScheduleSimulation: one optimizer step of a Schedule played out on
// stage times, with no ranks started (the cost model's step prediction and
// `sluice simulate`).
//
// Model: every stage (chunk) takes its StageTimes per micro-batch; a message
// between stages takes `comm` seconds one way; each rank runs its actions in
// its order: a send costs nothing and never blocks, a receive waits until the
// peer's send plus `comm`. A rank is idle from the end of its last compute
// action (or the step's start) until its next one starts; with RefillCosts
// that idle time lengthens the next action (Note [refill after a wait],
// partition/Refill.h). The result records every compute action and every
// receive that waited, with start and end times, and what each one waited
// for, so that callers can draw the step and follow its critical path.
//
//   auto s = makeSchedule("1f1b", 4, 8);
//   auto sim = simulateStepWithRefill(s, std::vector<StageTimes>(4, {1, 2, 0, 0}), 0, {});
//   sim.stepTime;                 // 33 = (8 + 3) x (1 + 2)
//   bubbleRate(s, sim);           // 9 / 33: (p - 1)(F + B + W) over the step
//   criticalPath(sim);            // F0 on stage 0, 1, 2, 3, then ...
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/WaitPolicy.h"
#include "pipeline/Schedule.h"

namespace sluice::pipeline {

// Note [refill after a wait] (partition/Refill.h): a compute action of stage
// s that starts after its rank idled for w seconds runs longer by
// share[s] x its own time x min(1, w / waitSeconds). No shares (or
// waitSeconds 0): nothing is charged.
struct RefillCosts {
  std::vector<double> share;  // per stage (chunk)
  double waitSeconds = 0;
  bool charged() const { return waitSeconds > 0 && !share.empty(); }
};

// One simulated interval on a rank: a compute action (F, B, Bi, W) or a
// receive that waited or copied its message in (start: when the rank
// reached it; end: when the message was in). `after` is what the interval
// could not start before: the rank's previous interval, or, for a receive
// that waited, the compute action whose send it waited for ({-1, -1}:
// nothing, the step's start).
struct SimulatedAction {
  Action action;
  double start = 0, end = 0;
  std::pair<int, int> after{-1, -1};  // (rank, index into that rank's intervals)
};

struct StepSimulation {
  double stepTime = 0;                // the makespan
  std::vector<double> refillSeconds;  // per stage: what refill added over the step
  std::vector<std::vector<SimulatedAction>> ranks;  // per rank, in time order
  std::vector<double> busy;           // per rank: seconds of compute
};

// The step under `times` (one per stage) and `comm`; see the header.
// ScheduleError when the schedule deadlocks or the times do not match it.
double simulateStep(const Schedule& schedule, const std::vector<StageTimes>& times, double comm = 0);
StepSimulation simulateStepWithRefill(const Schedule& schedule, const std::vector<StageTimes>& times, double comm,
                                      const RefillCosts& refill);

// Note [ranks sharing cores]: the same step when the ranks share `cores`
// cores of one host (CPU ranks, `cores` in ranks' worth: cores / threads per
// rank). It plays out what such ranks do, in time order:
// - While n ranks are busy, each runs at sharedRate(n, cores) of its speed.
//   Busy is computing, copying a message in, or polling.
// - A message is the receiver's work: shared memory between processes is
//   read by the receiver (Open MPI's single copy), so a receive copies for
//   `comm` seconds of its rank's share once it sees the sender's send.
// - A rank that reaches a receive before its message waits as Work::wait
//   does (`waits`, core/WaitPolicy.h): it polls, holding a core, for
//   pollSeconds, then sleeps and sees the message only at its next poll.
//   WaitPolicy{}: it sees it at once and holds no core.
// cores <= 0: every rank has its own core and messages cost the wire time
// (simulateStepWithRefill). With a core per rank, comm = 0 and WaitPolicy{},
// both give the same step.
StepSimulation simulateStepOnCores(const Schedule& schedule, const std::vector<StageTimes>& times, double comm,
                                   const RefillCosts& refill, double cores, const WaitPolicy& waits = {});

// Note [ranks sharing cores]: how fast each of `busy` ranks runs when they
// share `cores` cores. The scheduler spreads them as evenly as it can (3 on
// 2 cores: one core runs 2 of them, the other 1), and over one action (ms to
// tens of ms) a rank mostly stays where it was put; it is equally likely to
// be on any of the places. So an action takes its expected time over the
// places, the mean of 1 / rate, not the time at the mean rate: 3 ranks on 2
// cores each run at 3/5 of their speed (5/3 of the time), not at 2/3. Where
// the cores divide the ranks evenly (4 on 2), or cores is not a whole number
// (threads per rank over a core), it is the even share, cores / busy; never
// more than 1.
double sharedRate(int busy, double cores);

// The zero-bubble papers' bubble rate, (cost - busy) / cost, with cost the
// step time and busy the most loaded rank's compute time (for equal stages
// every rank's, m (F + B + W) per stage it hosts): how far the step is from
// the bound its busiest rank sets.
double bubbleRate(const StepSimulation& sim);

// The chain of intervals that sets the step time, from the step's start to
// the last compute action to end: each interval's `after`, followed back.
std::vector<std::pair<int, SimulatedAction>> criticalPath(const StepSimulation& sim);

// Per rank, the most micro-batches holding activations at once (between F
// and their last backward piece), summed over the rank's stages and divided
// by its chunks: a rank's whole model slice per micro-batch counts 1.
std::vector<double> peakActivationMicroBatches(const Schedule& schedule);

// The trace name and stream of an action, as a real run records it
// (core/Trace.h): "F3" / "Bi3" / "W3" / "B3" on "compute", "recv activation
// 3" on "recv", ...; with several stages per rank the stage follows ("F3 s2").
std::pair<std::string, std::string> traceNameOf(const Action& a, bool chunked);

}  // namespace sluice::pipeline
