// partition::Partitioner: the stage split and per-node actions that minimise
// the cost model's step time (CostModel.h) with every stage within budget.
//
// Why partitionOptimal is exact
// 1. For fixed cuts, stages are independent: a stage's actions change only its
//    own time and memory, and the step time sum t_k + (m-1) max t_k grows with
//    every t_k, so each stage should take its cheapest actions that fit. A
//    stage's best actions are a covering knapsack over its saved storages:
//    free at least `need` units (bytes in units of budget/1024, CostModel.h)
//    at least cost. The cost is recompute seconds plus max(0, swap I/O - the
//    stage's compute), which is not additive, so the knapsack keeps a Pareto
//    front per unit count (Knapsack.h). The swap window is memory only when
//    something is swapped, so each stage is solved twice, recompute only
//    (without the window) and with swap (with it), and the better is taken.
// 2. Over cuts, for a fixed last stage the step time is monotone in the
//    earlier stages' (max t, sum t), so only Pareto-optimal prefixes matter:
//    the DP keeps, for every (stage k, end node j), the Pareto front of
//    (max, sum) over all splits of nodes [0, j) into k + 1 stages, and extends
//    each front point by every possible next stage.
// Complexity: n nodes, p stages, U <= 1024 + n units, F the front size (a few
// points in practice): O(n^2 * p * F) for the DP plus O(n^2 * U) for the
// knapsacks (times the front size), which grow one node at a time for each
// start node (never past the first end node that cannot fit, since the needed
// units grow at least as fast as the freeable ones).
// Thread-safe (pure functions).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "partition/CostModel.h"

namespace sluice::partition {

struct Partition {
  std::vector<int> cuts;          // stages - 1 increasing node indices
  std::vector<StageCost> stages;  // with each stage's best actions
  double stepTime = 0;
};

// The optimal partition. Throws PlanError when no split fits the budget; the
// message names the smallest budget with which one would (minimalBudget).
Partition partitionOptimal(const Problem& problem);

// bestStage's answers for one Problem, kept by (stage, first, end): the
// planner's cut refinement asks for the same stages many times. Use one memo
// per Problem only. Not thread-safe.
class StageMemo {
 public:
  const StageCost& get(const Problem& problem, int stage, int first, int end);

 private:
  std::map<std::array<int, 3>, StageCost> stages_;
};

// The best actions for the given cuts. Throws PlanError when a cut is invalid
// or a stage cannot fit the budget with every freeable tensor freed. With a
// memo (of this problem), stages it has seen are not solved again.
Partition partitionWithCuts(const Problem& problem, const std::vector<int>& cuts, StageMemo* memo = nullptr);

// The cheapest actions for one stage (what partitionOptimal uses). fits = false
// when even freeing every freeable tensor is not enough.
StageCost bestStage(const Problem& problem, int stage, int first, int end);

// The smallest per-stage budget (bytes, to 1/65536 of it) with which
// partitionOptimal finds a plan; -1 when none does (e.g. more stages than
// valid cuts). Every larger budget finds one too (Note [memory unit]).
int64_t minimalBudget(const Problem& problem);

// The smallest budget (to 1/65536 of it) under which bestStage fits stage
// `stage` of [first, end), decided without its knapsacks (some freeing
// variant's need is at most what it may free); -1 when none does.
int64_t minimalStageBudget(const Problem& problem, int stage, int first, int end);

// The smallest budget (to 1/65536 of it) above `below` for which `fits`
// holds, which must be monotone in the budget (Note [memory unit]): gallops
// up from `below` (which must not fit) in steps of `unit` doubling, then
// bisects. -1 when nothing up to 2^61 bytes fits.
int64_t smallestFittingBudget(int64_t below, int64_t unit, const std::function<bool(int64_t)>& fits);

// Internal (Partitioner.cpp, PartitionWithCuts.cpp): a budget for a message,
// `need` per stage for the rank's `shares` stages ("X: set memory.budget_mb
// to at least Y (or pass --budget-mb)").
std::string budgetAdvice(int64_t need, int shares);

}  // namespace sluice::partition
