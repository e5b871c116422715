#include "partition/AutoSchedule.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/Error.h"
#include "pipeline/Schedule.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice::partition {

std::vector<const pipeline::ScheduleKind*> autoCandidates(int stages, int chunks, int cuts) {
  // Interleaved ones where the config allows them (pipeline.chunks > 1,
  // Config.h) and the cuts, if given, are for them.
  const bool cutsForInterleaved = cuts == 0 || cuts == stages * chunks - 1;
  std::vector<const pipeline::ScheduleKind*> kinds;
  for (auto& k : pipeline::scheduleKinds()) {
    if (k.autoOrder >= 0 && (!k.interleaves || (chunks > 1 && cutsForInterleaved)) && (k.fixedChunks == 0 || chunks == k.fixedChunks)) {
      kinds.push_back(&k);
    }
  }
  std::stable_sort(kinds.begin(), kinds.end(), [](auto* a, auto* b) { return a->autoOrder < b->autoOrder; });
  return kinds;
}

Plan makePlanFor(const OpGraph& graph, const Profile& profile, PlanSettings settings, const std::vector<int>& cuts,
                 std::string* why) {
  const int chunks = settings.chunks;
  auto plan = [&](const pipeline::ScheduleKind& kind) {
    settings.schedule = pipeline::ScheduleChoice::of(kind);
    settings.chunks = kind.interleaves ? chunks : 1;
    return cuts.empty() ? makePlan(graph, profile, settings)
                        : planForCuts(graph, profile, settings, cuts);
  };
  if (!settings.schedule.isAuto()) return plan(settings.schedule.kind());
  const auto candidates = autoCandidates(settings.stages, chunks, static_cast<int>(cuts.size()));
  std::optional<Plan> best;
  std::ostringstream report, failures;
  report.precision(1);
  report << std::fixed;
  for (const auto* kind : candidates) {
    const auto& name = kind->name;
    try {
      auto p = plan(*kind);
      report << (report.tellp() > 0 ? ", " : "") << pipeline::scheduleLabel(*kind, chunks)
             << " " << p.stepTime * 1e3 << " ms";
      if (!best || p.stepTime < best->stepTime * (1 - 1e-3)) best = std::move(p);
    } catch (const PlanError& e) {
      report << (report.tellp() > 0 ? ", " : "") << name << " does not fit";
      failures << "\n  " << name << ": " << e.what();
    }
  }
  if (!best) throw PlanError("pipeline.schedule auto: no schedule fits:" + failures.str());
  if (why) {
    *why = "pipeline.schedule auto chose " + best->schedule->name + ", the smallest predicted step time (" + report.str() +
           "; zb-h1, interleaved-zb and zbv with the profiled weight-gradient share of each stage's backward)";
  }
  return std::move(*best);
}

}  // namespace sluice::partition
