// partition::CostModel: predicts a pipeline stage's time and memory.
//
// The model (all times per micro-batch, memory per stage):
//   Stage k of p runs nodes [first, end). Every node j has forward time f_j,
//   backward time b_j, saved bytes s_j (activations autograd keeps for
//   backward, see Profile.h), parameter bytes w_j, and whether it may be
//   recomputed. Each node's saved tensors get one action:
//     Keep       stays in memory until backward;
//     Swap       goes to the swap tier in forward and comes back for backward:
//                costs s_j * (1/write_bw + 1/read_bw) seconds. The CPU tier is
//                a file written and read on the compute thread, so this time
//                is not hidden behind compute;
//     Recompute  is dropped and rebuilt by rerunning the node's forward before
//                its backward: costs f_j seconds.
//   time t_k = sum f + sum b + swap + recompute
//            + comm at each cut the stage touches, 2 * (latency + X_c / bw)
//              (activations forward, their gradients backward; X_c = bytes
//              live across cut c)
//            + the loss's forward and backward on the last stage.
//   memory M_k = static + inFlight_k * (sum of kept s_j), where
//              static = paramBytes * staticPerParamByte (weights, gradients
//              and Adam state: 4 for AdamW, 2 + 2/dp for DistAdam over dp) and
//              inFlight_k = m for GPipe, min(p - k, m) for 1F1B.
//   step time T = sum_k t_k + (m - 1) * max_k t_k: one micro-batch passes
//              every stage, the other m - 1 are paced by the slowest stage.
//   The budget constraint counts freed bytes (swapped or recomputed) in whole
//   units u = max(1, budget / 1024), each node's rounded down: a stage fits
//   when  sum over freed nodes of floor(s_j / u)  >=  ceil(ceil(E / inFlight) / u),
//   E = static + inFlight * sum s_j - budget (the excess with everything
//   kept; E <= 0 needs nothing freed, and static > budget never fits). This
//   is conservative (a stage that fits in units fits in bytes) and makes the
//   choice of freed tensors a knapsack over at most 1024 units per stage
//   (see Partitioner.h).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::partition {

enum class Action { Keep = 0, Swap = 1, Recompute = 2 };
const char* actionName(Action a);

struct NodeCost {
  double forward = 0, backward = 0;  // seconds
  int64_t saved = 0, params = 0;     // bytes
  bool recomputable = true;
};

struct Problem {
  std::vector<NodeCost> nodes;
  std::vector<int64_t> cutBytes;  // size n + 1: bytes live across cut c (0 at 0 and n)
  std::vector<char> validCut;     // size n + 1: may a stage start at c? (0 and n always)
  double lossSeconds = 0;         // forward + backward of the loss, last stage only
  double p2pBandwidth = 0;        // bytes/s; 0: communication is free
  double p2pLatency = 0;          // seconds
  double swapSecondsPerByte = 0;  // 1/write_bw + 1/read_bw; 0: no swap tier (Swap not allowed)
  int stages = 1;
  int microBatches = 1;
  bool gpipe = false;              // else 1F1B
  int64_t budgetBytes = 0;         // per stage; 0: no limit
  double staticPerParamByte = 4;   // see above

  int numNodes() const { return static_cast<int>(nodes.size()); }
  // Throws PlanError when the sizes disagree or a value is negative.
  void validate() const;
};

int inFlight(const Problem& problem, int stage);
int64_t memoryUnit(const Problem& problem);
double commSeconds(const Problem& problem, int cut);  // both directions at one cut; 0 at 0 and n
// What freeing node j's saved bytes costs: the cheaper allowed action and its
// seconds. Returns Action::Keep when the node cannot be freed (saved bytes
// below one memory unit, or neither recompute nor swap allowed).
Action cheapestFree(const Problem& problem, int node, double* seconds);

struct StageCost {
  bool fits = false;
  int stage = 0, first = 0, end = 0, inFlight = 0;
  double forward = 0, backward = 0, comm = 0, swap = 0, recompute = 0, loss = 0;
  double time = 0;  // the sum of the above
  int64_t paramBytes = 0, staticBytes = 0, savedBytes = 0, keptBytes = 0, swappedBytes = 0, recomputedBytes = 0;
  int64_t peakBytes = 0;  // static + inFlight * keptBytes
  std::vector<std::pair<int, Action>> freed;  // nodes whose saved tensors are not kept
};

// The cost of stage `stage` over [first, end) with the given actions (one per
// node in the range; Keep for nodes absent from `freed`). Throws PlanError on
// an action the node does not allow. fits = false when over budget.
StageCost evaluateStage(const Problem& problem, int stage, int first, int end,
                        const std::vector<std::pair<int, Action>>& freed);

double stepTime(const std::vector<StageCost>& stages, int microBatches);

}  // namespace sluice::partition
