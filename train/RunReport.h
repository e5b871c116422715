// train::RunReport: the end-of-run report's numbers and text, from plain
// inputs. TrainerImpl's report members (train/TrainerReport.cpp) gather the
// inputs (worker metrics, counters, the plan, the ranks' rows over the world
// communicator) and log what these return. Pure: no ranks, no tensors, no
// logging, so every line is tested on made-up inputs
// (tests/train/RunReportTest.cpp, a torch-free unit: the inputs are plain
// structs here rather than partition::Plan or pipeline::ComputeTimes, whose
// headers reach LibTorch's). The lines tests and benches read keep their
// exact text: "compute per micro-batch:", the metrics report's, the hosts
// rows and rank 0's tables.
//
//   predictRank(stagesOnRank)                   // this rank's stages together: peak, swap window, compute
//   predictionLine(stage, prediction)           // "stage 0 plan predicts: ..."
//   computePerMicroBatch(warm, steps, 2)        // medians per micro-batch over the timed steps
//   computeLine(stage, medians, warmSteps)      // "stage 0 compute per micro-batch: ..." (bench/partition.sh reads it)
//   compileLine(stage, "eager", worker)         // "stage 0 eager: 3 compiles, ..."
//   metricsReportText(numbers)                  // "metrics report (stage 0, ...)" and its lines (tests/cli read them)
//   transferLine(counting, start, now, steps)   // "host<->device copies per step: ..."
//   settingsTable(settings)                     // "settings" and its rows (tests/cluster read the hosts)
//   rankComputeTable(rows, {3, 2, 2, 1, true})  // rank 0: compute per micro-batch, measured vs predicted
//   rankMemoryTable(rows, otherBytes)           // rank 0: model peak measured vs predicted, resident peak
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/TransferGuard.h"

namespace sluice {

// What the plan predicts for one stage (partition::PlanStage's fields of
// the same names; the glue copies them).
struct StagePrediction {
  double forward = 0, backward = 0, loss = 0, recompute = 0, swap = 0, refill = 0;  // seconds per micro-batch
  int inFlight = 0;
  int64_t keptBytes = 0, peakBytes = 0, windowBytes = 0;
  int64_t rankPeakBytes = 0;  // several stages per rank: the hosting rank's predicted peak (0: none)
};
// The plan's prediction for one rank's stages together (several under
// interleaved schedules and zbv).
struct RankPrediction {
  // The rank's peak: the plan's rank peak when its stages have one
  // (rankPeakBytes, their holdings peak at different moments), else the sum
  // of the stages' peaks.
  int64_t peakBytes = 0;
  int64_t windowBytes = 0;    // the swap window the prediction counts whole (one per rank): the stages' largest
  double computeSeconds = 0;  // per micro-batch: forward + backward + loss + recompute + swap stall + refill
  StagePrediction together;   // those six terms and keptBytes summed, inFlight the largest
  int64_t savedPeakBytes = 0;  // saved activations: the sum over the stages of in flight x kept
};
// stages: the plan's stages on this rank, in the rank's order.
RankPrediction predictRank(const std::vector<StagePrediction>& stages);
std::string predictionLine(int stage, const RankPrediction& prediction);

// One snapshot of a rank's compute totals since it started (pipeline's
// ComputeTimes summed over the rank's stages, as plain numbers).
struct ComputeTotals {
  double forwardSeconds = 0, backwardSeconds = 0;
  int64_t forwards = 0;  // stage forwards: micro-batches x the rank's stages
};
// Per micro-batch, the medians over the timed steps of each step's compute
// over its micro-batches (steps without micro-batches left out).
struct ComputeMedians {
  double forwardSeconds = 0, backwardSeconds = 0, computeSeconds = 0;  // computeSeconds: median of forward + backward
  int64_t steps = 0, microBatches = 0;  // steps counted, micro-batches timed
};
// warm: the totals before the first timed step; steps: after each timed step.
ComputeMedians computePerMicroBatch(const ComputeTotals& warm, const std::vector<ComputeTotals>& steps,
                                    int stagesOnRank);
std::string computeLine(int stage, const ComputeMedians& medians, int64_t warmSteps);
// The rank's compute against the plan's, term by term, so a gap names its
// term: the forward (with the loss) and the backward (with recompute and
// swap stalls), each measured against its prediction, and which is further
// off; refill after waits is charged to neither (it lengthens whichever
// action followed a wait). "" without a prediction.
std::string computeTermsLine(int stage, const ComputeMedians& measured, const RankPrediction& predicted);

// The rank worker's compile counts (core's StageMetrics, as plain numbers).
struct WorkerCounts {
  int64_t compiles = 0, cacheHits = 0;
  double compileSeconds = 0, executeSeconds = 0;
  std::vector<std::string> recompileCauses;
};
std::string compileLine(int stage, const std::string& execution, const WorkerCounts& worker);

// How host<->device copies were counted: not at all on a CPU run, not with
// logging.transfer_guard off, else by core/TransferGuard.h's hook.
enum class TransferCounting { CpuRun, Off, Counted };
// Per step, by direction, which were Sluice's own (data, staging, swap, log
// reads) and the round trips the guard found (Note [round trip]).
std::string transferLine(TransferCounting counting, const TransferCounts& start, const TransferCounts& now,
                         double steps);

// The metrics report's numbers (end of run, and on SIGUSR2): the step
// counters and what the compute, the communicators and the transfer guard
// counted since training started.
struct MetricsNumbers {
  int stage = 0, replica = 0;
  int64_t steps = 0, logSteps = 0;
  int64_t syncsNonLog = 0, syncsLog = 0, maxSyncsNonLog = 0;  // host syncs, summed; the most in a non-log step
  double seconds = 0, computeSeconds = 0, waitSeconds = 0;    // over the steps: all, compute, waiting on communication
  int64_t sentBytes = 0, receivedBytes = 0, collectiveBytes = 0;  // over the steps
  WorkerCounts worker;
  TransferCounting transferCounting = TransferCounting::CpuRun;
  TransferCounts transfersAtStart, transfersNow;
};
std::string metricsReportText(const MetricsNumbers& numbers);

// What the settings table shows (config, placement, cuts, hosts), as text and numbers.
struct RunSettings {
  int stages = 1, dataParallel = 1, microBatches = 1;
  int64_t microBatchSize = 0;
  std::string schedule;  // the schedule's name
  bool scheduleAuto = false;
  int chunks = 1;           // stages per rank
  std::string placement;    // their placement (shown when chunks > 1)
  int64_t graphNodes = 0;
  std::vector<int> cuts;
  std::string execution, memoryPolicy;
  double budgetMb = 0;  // per stage; 0: none
  bool hardLimit = false;
  int threads = 1, nodes = 1;
  std::string host;                     // this rank's (shown when nodes > 1)
  std::vector<std::string> hostOfRank;  // by world rank (rank r: stage r % stages, replica r / stages)
  std::string blas, libtorch, mpi;
};
std::string settingsTable(const RunSettings& settings);

// One rank's measurements and the plan's predictions (0: none).
struct RankReportRow {
  int64_t stage = 0;
  int64_t modelPeakBytes = 0, predictedPeakBytes = 0, residentBytes = 0;
  int64_t computeUs = 0, predictedComputeUs = 0;  // per micro-batch
};
inline constexpr int kRankReportColumns = 6;  // the fields above, as gathered

// How the compute was taken, for the table's heading and its note on shared cores.
struct ComputeContext {
  int64_t warmSteps = 0;                    // steps left out before the medians
  int ranksOnHost = 1, threadsPerRank = 1;  // this host's
  int cores = 1;
  bool cpu = true;  // a CPU run (ranks that share cores compute longer than their profile)
};

// How far a measurement is from its prediction, in whole percent ("-" without a prediction).
std::string percentOff(double measured, double predicted);
std::string rankComputeTable(const std::vector<RankReportRow>& rows, const ComputeContext& context);
std::string rankMemoryTable(const std::vector<RankReportRow>& rows, int64_t bytesOutsideModel);

}  // namespace sluice
