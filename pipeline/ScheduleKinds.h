// pipeline::ScheduleKind: one row per schedule a user can name in
// pipeline.schedule, with its traits; every layer asks the table, none
// compares schedule names. Adding a schedule: its builder (a function that
// returns a Schedule, see Schedule.h) and one row in ScheduleKinds.cpp
// (docs/architecture.md, "Add a schedule"). The row is the only place its
// name lives: a row's build names the schedule it returns (builders leave
// Schedule::name empty), and a library row's builder is told the row's name
// for its messages.
//
//   const auto& k = pipeline::scheduleKind("zb-h1");   // ScheduleError listing the names otherwise
//   if (k.interleaves) ...;                            // several stages per rank
//   auto s = k.build(ranks, /*chunks=*/1, microBatches, /*costs=*/nullptr);
//
// The table is filled before main() and read-only after; addScheduleKind is
// for rows outside the library (a test's toy schedule), at start-up only.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "pipeline/Schedule.h"

namespace sluice::pipeline {

struct ScheduleKind {
  std::string name;
  std::string summary;
  bool interleaves = false;           // pipeline.chunks stages per rank (pipeline.microbatches a multiple of stages)
  bool fitsStageTimes = false;        // built again with the plan's stage times (ScheduleCosts)
  bool holdsEveryMicroBatch = false;  // every micro-batch in flight at once (GPipe; the cost model's shortcut)
  int autoOrder = -1;                 // pipeline.schedule auto tries it in this order (ties go to the earlier); -1: not
  // ranks, chunks (1 unless interleaves), micro-batches, costs (nullptr: unit costs; ignored unless fitsStageTimes).
  // In the table, it returns the schedule named by the row (the table wraps the builder given).
  std::function<Schedule(int, int, int, const ScheduleCosts*)> build;
  bool vShape = false;  // its two chunks per rank placed in a V (Placement), not a loop; any micro-batch count
  int fixedChunks = 0;   // the stages per rank it must have (zbv: 2); 0: any (pipeline.chunks)
  // It takes micro-batches pipeline.stages at a time: pipeline.microbatches a multiple of pipeline.stages.
  bool microBatchesInRankGroups = false;
};

const std::deque<ScheduleKind>& scheduleKinds();  // rows keep their addresses
const ScheduleKind* findScheduleKind(const std::string& name);  // nullptr when there is none
const ScheduleKind& scheduleKind(const std::string& name);      // ScheduleError naming the choices
// Adds a row; ScheduleError when the name is taken. Returns true (for a static initializer).
bool addScheduleKind(ScheduleKind kind);

// pipeline.schedule, parsed once (config/Config.h): a row of the table, or
// auto (every candidate planned, the fastest kept: partition/AutoSchedule.h;
// the plan records the pick). Compared by row, never by name.
class ScheduleChoice {
 public:
  static ScheduleChoice of(const ScheduleKind& kind) { return ScheduleChoice(&kind); }
  static ScheduleChoice automatic() { return ScheduleChoice(nullptr); }
  bool isAuto() const { return kind_ == nullptr; }
  const ScheduleKind& kind() const;  // ScheduleError under auto
  std::string name() const;          // the row's name, or "auto"
  bool operator==(const ScheduleChoice& other) const { return kind_ == other.kind_; }

 private:
  explicit ScheduleChoice(const ScheduleKind* kind) : kind_(kind) {}
  const ScheduleKind* kind_;  // nullptr: auto
};

}  // namespace sluice::pipeline
