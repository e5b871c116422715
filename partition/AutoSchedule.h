// partition::makePlanFor: the plan for a job's settings, with
// pipeline.schedule auto resolved here: each candidate schedule planned, the
// fastest predicted kept. The planner's choice of schedule, as its choice of
// cuts and memory plan: `sluice partition`, training's planning
// (train/Planning.h) and `sluice simulate` all call it.
#pragma once

#include <string>
#include <vector>

#include "core/OpGraph.h"
#include "partition/Plan.h"
#include "partition/Profile.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice::partition {

// pipeline.schedule auto's candidates, in the table's order (autoOrder):
// the interleaving ones only with chunks > 1 and `cuts` (the count of
// pipeline.cuts, 0: none) for stages x chunks pieces, zbv only with 2 chunks.
std::vector<const pipeline::ScheduleKind*> autoCandidates(int stages, int chunks, int cuts);
// The plan for these settings (for `cuts` when not empty). With
// pipeline.schedule auto (settings.schedule.isAuto()), plans for each of
// autoCandidates (the interleaving ones with settings.chunks stages per rank)
// and keeps the one with the smallest predicted step time among those that
// fit the budget (ties: the earlier, so 1f1b before gpipe, which holds
// more); `why` (if given) says what each was predicted and why this one.
Plan makePlanFor(const OpGraph& graph, const Profile& profile, PlanSettings settings, const std::vector<int>& cuts,
                 std::string* why = nullptr);

}  // namespace sluice::partition
