// pipeline::Schedule: a pipeline schedule as plain data, testable without ranks.
//
// For each rank, the ordered list of actions it executes in one optimizer
// step. Every action names its stage (a model chunk); Placement says which
// rank hosts it: r, r + ranks, r + 2 ranks, ... (a loop: interleaved 1F1B),
// exactly stage r when stages == ranks (gpipe, 1f1b, zb-h1), or r and
// 2 ranks - 1 - r (a V: zbv, whose stages ranks - 1 and ranks share a rank,
// so that boundary's messages go from the rank to itself). Messages go between
// consecutive stages, to and from the ranks the map names. Sends are nonblocking (they complete once the peer posts the matching
// receive, which StageWorker posts ahead of the compute before it); receives
// block. A micro-batch's backward is either one action (Backward: input and
// weight gradients together) or two (BackwardInput: the gradient of the
// stage's inputs only, which is what the previous stage waits for; then
// BackwardWeight: the parameters' gradients, any time later).
// checkSchedule() proves a schedule valid under exactly that model:
//   - every action's stage lives on the rank that runs it;
//   - every micro-batch is forwarded and then backwarded exactly once per
//     stage (Backward, or BackwardInput followed by BackwardWeight);
//   - stage s > 0 receives activation mb before F(mb) and sends its grad after
//     B(mb) (or BackwardInput(mb)); stage s < p-1 sends activation mb after
//     F(mb) and receives its grad before B(mb) (or BackwardInput(mb));
//     nothing else is sent or received;
//   - every receive is matched by a send of the peer, and executing all stages
//     with blocking receives and nonblocking sends finishes (no deadlock).
// peakInFlight() is the schedule's activation memory in micro-batches, per
// stage: a micro-batch holds its activations from its forward until its
// backward is complete (its BackwardWeight when split).
//
//   auto s = sluice::pipeline::makeSchedule("zb-h1", /*stages=*/4, /*microBatches=*/8);
//   sluice::pipeline::checkSchedule(s);   // throws ScheduleError naming the fault
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace sluice::pipeline {

struct ScheduleKind;  // a row of the table (ScheduleKinds.h)

enum class ActionKind { RecvActivation, Forward, SendActivation, RecvGrad, Backward, SendGrad, BackwardInput, BackwardWeight };

struct Action {
  ActionKind kind;
  int microBatch;
  int stage = 0;  // the model chunk it runs on (a stage of rank rankOf(stage))
  bool operator==(const Action& o) const {
    return kind == o.kind && microBatch == o.microBatch && stage == o.stage;
  }
};

// A forward or a piece of backward (B, Bi or W): what a rank computes, as
// opposed to its sends and receives. runStep posts the receives of the next
// one while one runs (Note [communication buffers], partition/Plan.cpp).
bool isCompute(const Action& a);
bool isBackwardPiece(const Action& a);  // B, Bi or W

// Note [rank prefetch order]: a rank's stages share one swap engine, whose
// reads run in the order they were queued, within one window. Before action
// x of a rank's `actions`, runStep queues the reads of the backward pieces
// this returns, in its order (reads(piece): the piece reads swapped
// storages; others are passed over):
// - at a backward piece: that piece, then the rank's next one, whichever
//   stage it is on; none whose forward comes at x or later (the search ends
//   there). A later piece never goes ahead of an earlier one, which would
//   hold the window while the earlier one reads on demand;
// - at a receive or send whose next compute action is a backward piece: that
//   piece, so its reads run while the receive waits;
// - at a forward, or a receive or send before one: nothing (reads held
//   through a forward would leave its writes less of the window).
std::vector<size_t> prefetchTargets(const std::vector<Action>& actions, size_t x,
                                    const std::function<bool(const Action&)>& reads);

// Which rank hosts which stage (ranks x chunks stages): a loop (stage s on
// rank s % ranks) or, with v and 2 chunks, a V (rank r hosts r and
// 2 ranks - 1 - r: the micro-batch goes down the ranks and back up).
struct Placement {
  int ranks = 1, chunks = 1;
  bool v = false;
  int rankOf(int stage) const;
  std::vector<int> stagesOf(int rank) const;  // ascending
  // For plans and reports: "stage s on rank s % 2", "in a V: rank r hosts
  // stages r and 3 - r".
  std::string describe() const;
};

struct Schedule {
  // The table row's name (pipeline/ScheduleKinds.h: the row's build, and so
  // makeSchedule, stamps it); empty from a builder called directly: builders
  // name no schedule (their messages take `what`, words describing them).
  std::string name;
  int stages = 1;  // model chunks, in model order
  int microBatches = 1;
  std::vector<std::vector<Action>> actions;  // [rank] -> ordered actions
  int ranks = 0;                             // 0: one stage per rank (ranks == stages)
  bool vShape = false;                       // placed in a V (Placement), else a loop
  int rankCount() const { return ranks > 0 ? ranks : stages; }
  // Stages per rank (1 unless interleaved).
  int chunks() const { return stages / rankCount(); }
  Placement placement() const { return {rankCount(), chunks(), vShape}; }
  int rankOf(int stage) const { return placement().rankOf(stage); }
  // The actions of one stage, in the order its rank runs them.
  std::vector<Action> stageActions(int stage) const;
};

// Seconds per micro-batch of one stage: forward, whole backward, and its split
// (backwardInput + backwardWeight, used by split schedules).
struct StageTimes {
  double forward = 0, backward = 0, backwardInput = 0, backwardWeight = 0;
};
// What the zero-bubble schedules may be fitted to: one StageTimes per stage
// (chunk) and the one-way time of a message between stages.
struct ScheduleCosts {
  std::vector<StageTimes> times;
  double comm = 0;
};

// GPipe: all forwards, then all backwards (in micro-batch order).
Schedule makeGPipe(int stages, int microBatches);
// 1F1B (PipeDream-flush): stage s runs min(p-s-1, m) warm-up forwards, then
// alternates one forward and one backward, then drains the backwards.
Schedule make1F1B(int stages, int microBatches);
// Zero-bubble ZB-H1 (Qi et al., ICLR 2024): backward split into
// BackwardInput (B) and BackwardWeight (W); B runs as soon as its gradient is
// there (it is what the previous stage waits for), W fills time that would be
// bubble. Without costs, the paper's order: stage s runs min(p - s, m)
// forwards, then for each micro-batch j its B, the W of micro-batch j - s
// (later stages hold their Ws longer, into what would be the drain's bubble)
// and its next forward, then the Ws left. With equal stages and W <= F its
// bubble is (p - 1)(F + B - W), a third of 1F1B's when F = B = W
// (ScheduleSimulationTest). Memory: at most min(p - s, m) micro-batches
// between F and B (1F1B's), and at most min(p, m) between F and W (1F1B's
// peak, that of stage 0), so no stage holds more than 1F1B's most loaded stage.
// With `costs` (the plan's stage times): list-scheduled in time with those
// times (a free stage runs a ready B, else the next F if its memory allows,
// else the oldest pending W, else it waits for the next input), holding no rank more pieces between F and B, F and W, or B and W
// than the unit-cost schedule does, and kept only when no stage holds more
// micro-batches (peakInFlight, peakWeightPending) than in the unit-cost one
// (whose memory the plan predicts) and simulateStep() predicts it faster
// under those costs; otherwise the unit-cost schedule.
// Every rank must pass the same costs (they come from the plan file).
// `what`: what its messages call it (the table passes the row's name).
Schedule makeZeroBubbleH1(int stages, int microBatches, const ScheduleCosts* costs = nullptr,
                          const std::string& what = "ZB-H1");
// Interleaved 1F1B (Narayanan et al., SC 2021; Megatron-LM's virtual
// pipeline): `chunks` stages per rank, stage s on rank s % ranks, so each
// rank's work comes in v = chunks smaller pieces and the bubble shrinks to
// (p - 1) / (v m + p - 1). Rank r warms up with (p - r - 1) * 2 + (v - 1) p
// forwards of micro-batch pieces taken p micro-batches at a time, chunk by
// chunk, then alternates one forward and one backward (backwards from the last
// chunk down). Needs m a multiple of p (ScheduleError otherwise). Memory per
// rank: at most that warm-up + 1 pieces in flight. `what`: as makeZeroBubbleH1.
Schedule makeInterleaved1F1B(int ranks, int chunks, int microBatches, const std::string& what = "interleaved 1F1B");
// Interleaved zero-bubble: interleaved 1F1B's chunks and piece order with
// ZB-H1's split backward, list-scheduled in time (unit costs F = B = W = 1,
// except stage 0, whose inputs are data: B = 0, W = 2; a free rank runs its next backward piece's B when ready, else its next
// forward piece if memory allows, else its oldest pending W). Memory: the
// same warm-up + 1 pieces between F and B as interleaved 1F1B, and at most
// its most loaded rank's (rank 0's) between F and W. Needs m a multiple of p.
// `costs`: as makeZeroBubbleH1 (one StageTimes per stage, ranks x chunks); `what` too.
Schedule makeInterleavedZeroBubble(int ranks, int chunks, int microBatches, const ScheduleCosts* costs = nullptr,
                                   const std::string& what = "interleaved zero bubble");
// ZBV (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024):
// ZB-H1's split backward on two chunks per rank placed in a V (rank r hosts
// stages r and 2 ranks - 1 - r), so the first and the last stage share rank
// 0 and each rank's two chunks take their backwards in turn. List-scheduled
// as makeInterleavedZeroBubble, but a free rank picks among both its stages' ready
// pieces: a B whose gradient is there (the older micro-batch first), else a
// forward whose input is there (chunk 1 first: it completes micro-batches)
// within memory, else its oldest pending W. Memory: at most 2 ranks pieces
// (half stages) between F and W per rank, 1F1B's rank-0 activations, of
// which at most 2 ranks - 1 - r on chunk 0, so chunk 1 always has room and
// the list scheduling cannot stall. Any m >= 1. `costs` as makeZeroBubbleH1
// (one StageTimes per stage, 2 x ranks); `what` too.
Schedule makeZeroBubbleV(int ranks, int microBatches, const ScheduleCosts* costs = nullptr,
                         const std::string& what = "ZBV");
// The schedules makeSchedule() knows (the rows of ScheduleKinds.h's table),
// for messages and config checks.
std::vector<std::string> scheduleNames();
// A schedule as the logs and tables name it: "zb-h1", or with several stages
// per rank "interleaved x2".
std::string scheduleLabel(const ScheduleKind& kind, int chunks);
std::string scheduleLabel(const std::string& name, int chunks);
// Where the schedule puts ranks x chunks stages (a loop unless the schedule
// is placed in a V). ScheduleError for a name that is no schedule.
Placement placementOf(const ScheduleKind& kind, int ranks, int chunks);
Placement placementOf(const std::string& name, int ranks, int chunks);
// The one place a Schedule is made from its row: `stages` are the ranks;
// `chunks` (stages per rank) must be 1 except for the kinds that interleave
// stages (their row's trait), where the schedule has stages x chunks stages.
// `costs` fit the kinds fitted to stage times (their row's trait) to the
// stages' times; the others ignore them. The schedule carries its row's
// name, and so do the builder's messages. The name overload (tests, tools)
// throws ScheduleError for names not in scheduleNames().
Schedule makeSchedule(const ScheduleKind& kind, int stages, int microBatches, int chunks = 1,
                      const ScheduleCosts* costs = nullptr);
Schedule makeSchedule(const std::string& name, int stages, int microBatches, int chunks = 1,
                      const ScheduleCosts* costs = nullptr);
// True when the schedule splits backwards into BackwardInput and BackwardWeight.
bool splitsBackward(const Schedule& schedule);

// A builder's pieces: micro-batch mb's forward on `stage` of `stages`, with
// its receive before and send after (none at the pipeline's ends); and its
// whole backward (Backward) likewise.
void appendForward(std::vector<Action>& out, int stage, int stages, int mb);
void appendBackward(std::vector<Action>& out, int stage, int stages, int mb);

// The simulation of a step on stage times: pipeline/ScheduleSimulation.h.

// inFlightLimit (optional, one per stage): also reject a stage whose
// peakInFlight() exceeds its limit (activation memory).
void checkSchedule(const Schedule& schedule, const std::vector<int>& inFlightLimit = {});

// Micro-batches whose forward finished but backward did not, at most, per stage.
std::vector<int> peakInFlight(const Schedule& schedule);
// Micro-batches whose forward finished but whose Backward or BackwardInput
// did not, at most, per stage (== peakInFlight for a whole backward).
std::vector<int> peakAwaitingBackward(const Schedule& schedule);
// What a stage holds at one moment: micro-batches between F and B/Bi, between
// Bi and W, and whether a BackwardInput is finishing (it holds its
// micro-batch's saved tensors and the gradients it captured for W at once).
struct HoldingMix {
  int beforeInput = 0, beforeWeight = 0;
  bool capturing = false;
};
// Per stage, its HoldingMix before and after each of its actions and at the
// end of each BackwardInput, keeping only those no other covers in every count.
std::vector<std::vector<HoldingMix>> holdingMixes(const Schedule& schedule);
// The same moments for one rank's stages together, in its action order: per
// moment, the stage whose action runs then, that action's index in the
// rank's list, and one HoldingMix per stage of the schedule (zero for other ranks').
struct HoldingMoment {
  int acting = 0;
  size_t action = 0;
  std::vector<HoldingMix> mix;
};
std::vector<HoldingMoment> rankHoldingMoments(const Schedule& schedule, int rank);
// Micro-batches between their BackwardInput and BackwardWeight, at most, per
// stage (they also hold the output gradients W re-enters with). 0 when whole.
std::vector<int> peakWeightPending(const Schedule& schedule);

std::string toString(ActionKind kind);
std::string toString(const Action& action);  // e.g. "F3", "recv_act2" (without its stage)
std::string toString(const Schedule& schedule);  // its name, or "(unnamed)", then its actions per rank
// How messages name a schedule: "schedule 'zb-h1'", or "schedule (unnamed)"
// for a builder's own (called directly, not through makeSchedule).
std::string scheduleTitle(const Schedule& schedule);

}  // namespace sluice::pipeline
