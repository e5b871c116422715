// cli::SimulateReport: what `sluice simulate` prints and draws, from
// each schedule's stage times (torch-free; cli/Simulate.h gets the
// times from a plan or from the command line).
//
// For one schedule: the schedule is built as training would build it (fitted
// to the stage times where its kind fits, ScheduleKinds.h) and played out by
// pipeline::simulateStepWithRefill; for fitted kinds the unit-cost order on
// the same times is simulated too, to show what fitting buys. Reported:
//   - step time: the pipeline's makespan, plus DistAdam's collectives after
//     it when data-parallel (not overlapped: an upper bound);
//   - bubble: the zero-bubble papers' rate, (cost - busy) / cost with busy
//     the most loaded rank's compute (pipeline::bubbleRate);
//   - peak activations per rank, in micro-batches of the rank's whole slice
//     (pipeline::peakActivationMicroBatches), and in bytes where a plan
//     predicted them;
//   - the critical path, as runs of intervals on one rank;
//   - a trace of the step in the format of a real run's (telemetry/TraceFile.h).
//
//   std::vector<SimulatedSchedule> all{simulateSchedule(input)};
//   std::cout << simulationTable(all) << simulationDetail(*fastest(all));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/WaitPolicy.h"
#include "pipeline/ScheduleKinds.h"
#include "pipeline/ScheduleSimulation.h"

namespace sluice {

struct SimulationInput {
  const pipeline::ScheduleKind* schedule = nullptr;  // a row of ScheduleKinds.h
  int ranks = 1, chunks = 1, microBatches = 1;
  pipeline::ScheduleCosts costs;  // one StageTimes per stage (ranks x chunks), seconds
  pipeline::RefillCosts refill;
  bool fit = true;                     // fit the kinds that fit to the stage times (pipeline.fit_schedule)
  std::vector<int64_t> rankPeakBytes;  // per rank, predicted by a plan (empty: unknown)
  int64_t budgetBytes = 0;             // per rank (0: none)
  double optimizerSeconds = 0;         // DistAdam's collectives after the pipeline
  double cores = 0;                    // the ranks share this many ranks' worth of cores (0: a device each)
  WaitPolicy waits;                    // with cores: how a waiting rank waits (core/WaitPolicy.h)
};

struct SimulatedSchedule {
  SimulationInput input;
  pipeline::Schedule schedule;
  pipeline::StepSimulation sim;
  double unitStepTime = 0;  // fitted kinds: the unit-cost order on the same times (0: not fitted)
  std::vector<double> peakMicroBatches;
  std::string failure;      // not simulated: why (it does not fit, the schedule cannot run, ...)
  double stepTime() const { return sim.stepTime + input.optimizerSeconds; }
};

// Simulates one schedule; a schedule that cannot be built for these numbers
// (ScheduleError) comes back with its failure.
SimulatedSchedule simulateSchedule(const SimulationInput& input);
// A candidate that was not simulated (its plan does not fit, ...).
SimulatedSchedule failedSchedule(const pipeline::ScheduleKind& schedule, int chunks, const std::string& why);

// The fastest simulated schedule (ties: the earlier); null when none was.
const SimulatedSchedule* fastest(const std::vector<SimulatedSchedule>& all);
// One row per schedule: step, bubble, unit-order step, peak activations
// and memory, each failure's reason below the table.
std::string simulationTable(const std::vector<SimulatedSchedule>& all);
// One schedule in detail: per rank busy, idle, bubble, peaks; the critical path.
std::string simulationDetail(const SimulatedSchedule& s);
// The simulated step as trace.json text: one process per rank, its compute
// actions and the receives it waited on, and the step.
std::string simulatedTrace(const SimulatedSchedule& s);

// --stage-times: "F,B,W" (every stage) or "F,B,W;F,B,W;..." (one per stage),
// milliseconds, each >= 0 and finite. The stages' StageTimes in seconds:
// forward F, backward B + W, split into B and W. ConfigError naming the
// flag and the bad part.
std::vector<pipeline::StageTimes> parseStageTimes(const std::string& text);

}  // namespace sluice
