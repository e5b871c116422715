// pipeline::Schedule: a pipeline schedule as plain data, testable without ranks.
//
// For each stage, the ordered list of actions it executes in one optimizer
// step. Sends are nonblocking (they complete once the peer posts the matching
// receive, which StageWorker posts at the start of the step); receives block.
// checkSchedule() proves a schedule valid under exactly that model:
//   - every micro-batch is forwarded and then backwarded exactly once per stage;
//   - stage s > 0 receives activation mb before F(mb) and sends its grad after
//     B(mb); stage s < p-1 sends activation mb after F(mb) and receives its
//     grad before B(mb); nothing else is sent or received;
//   - every receive is matched by a send of the peer, and executing all stages
//     with blocking receives and nonblocking sends finishes (no deadlock).
//
//   auto s = sluice::pipeline::makeSchedule("1f1b", /*stages=*/4, /*microBatches=*/8);
//   sluice::pipeline::checkSchedule(s);   // throws ScheduleError naming the fault
#pragma once

#include <string>
#include <vector>

namespace sluice::pipeline {

enum class ActionKind { RecvActivation, Forward, SendActivation, RecvGrad, Backward, SendGrad };

struct Action {
  ActionKind kind;
  int microBatch;
  bool operator==(const Action& o) const { return kind == o.kind && microBatch == o.microBatch; }
};

struct Schedule {
  std::string name;
  int stages = 1;
  int microBatches = 1;
  std::vector<std::vector<Action>> actions;  // [stage] -> ordered actions
};

// GPipe: all forwards, then all backwards (in micro-batch order).
Schedule makeGPipe(int stages, int microBatches);
// 1F1B (PipeDream-flush): stage s runs min(p-s-1, m) warm-up forwards, then
// alternates one forward and one backward, then drains the backwards.
Schedule make1F1B(int stages, int microBatches);
// name: "gpipe" | "1f1b"; throws ScheduleError for others.
Schedule makeSchedule(const std::string& name, int stages, int microBatches);

void checkSchedule(const Schedule& schedule);

// Micro-batches whose forward finished but backward did not, at most, per stage.
std::vector<int> peakInFlight(const Schedule& schedule);

std::string toString(ActionKind kind);
std::string toString(const Action& action);  // e.g. "F3", "recv_act2"
std::string toString(const Schedule& schedule);

}  // namespace sluice::pipeline
