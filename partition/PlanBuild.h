// partition/PlanBuild.h (internal to partition/): the steps makePlan and
// planForCuts (Plan.h) are built from, one concern per file:
//   Problem.cpp     the cost model's Problem from a graph and its profile, and
//                   full_recompute's fixed choices;
//   Prediction.cpp  a Partition's predicted step (simulated for the
//                   schedules that need it) and the Plan it becomes;
//   Plan.cpp        the search: baselines on fixed cuts, the partitioner,
//                   refinement for a schedule, layer boundaries first, and
//                   the method dispatch;
//   PlanFile.cpp    the plan.proto round trip;  PlanTable.cpp  `plan show`.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "core/OpGraph.h"
#include "partition/CostModel.h"
#include "partition/Plan.h"
#include "partition/Profile.h"

namespace sluice::partition {

// full_recompute: every saved storage made inside a transformer block and not
// read after it (the block's output is the checkpoint) is recomputed.
std::vector<std::pair<int, Action>> fullRecomputeChoices(const OpGraph& graph, const Profile& profile,
                                                         const Problem& p, int first, int end);

// The schedule the settings name (a row; ScheduleError under auto), fitted
// to `costs` when there are any: the one place the planner makes a Schedule
// (training makes the same from the plan: Plan::runSchedule).
pipeline::Schedule scheduleFor(const PlanSettings& st, const std::optional<pipeline::ScheduleCosts>& costs = std::nullopt);

// A partition's predicted step time and each stage's refill per micro-batch.
struct Prediction {
  double stepTime = 0;
  std::vector<double> refill;
};
Prediction predict(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p);
double simulatedStepTime(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p);

// Several stages per rank: each rank's memory bound, its stages together
// (Note [rank budget], Plan.cpp): the rank's predicted peak with every
// acting stage's transient as the budget bound counts it.
std::vector<int64_t> rankBounds(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p);

// The plan of a partition: its stages, decisions and predictions.
Plan toPlan(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& problem,
            const Partition& part);

}  // namespace sluice::partition
