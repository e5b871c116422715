// The Trainer's report phase (train/Trainer.h): glue that gathers what the
// end-of-run report needs (worker metrics, step counters, traffic, the plan,
// every rank's row over the world communicator) and logs the text
// train/RunReport.h makes of it: the metrics report, the settings table, the
// end-of-run lines per rank (compiles, compute per micro-batch measured vs
// predicted, memory measured vs predicted, what the memory plan swapped and
// recomputed) and rank 0's per-rank tables. Its own text: the trace, memory
// and utilisation lines.
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/Bytes.h"
#include "core/Flops.h"
#include "core/Log.h"
#include "core/SystemInfo.h"
#include "core/TransferGuard.h"
#include "train/Planning.h"
#include "telemetry/Timeline.h"
#include "train/RunReport.h"
#include "train/TrainerImpl.h"
#include "memory/DeviceMemory.h"

namespace sluice {
namespace fs = std::filesystem;

namespace {

WorkerCounts workerCounts(const StageMetrics& sm) {
  return {sm.compiles, sm.cacheHits, sm.compileSeconds, sm.executeSeconds, sm.recompileCauses};
}

StagePrediction stagePrediction(const partition::PlanStage& s) {
  StagePrediction p;
  p.forward = s.forward;
  p.backward = s.backward;
  p.loss = s.loss;
  p.recompute = s.recompute;
  p.swap = s.swap;
  p.refill = s.refill;
  p.inFlight = s.inFlight;
  p.keptBytes = s.keptBytes;
  p.peakBytes = s.peakBytes;
  p.windowBytes = s.windowBytes;
  p.rankPeakBytes = s.rankPeakBytes;
  return p;
}

ComputeTotals computeTotals(const pipeline::ComputeTimes& t) {
  return {t.forwardSeconds, t.backwardSeconds, t.forwards};
}

}  // namespace

std::string TrainerImpl::metricsReport() const {
  const auto& c = counters_;
  const auto ct = worker_->computeTimes();
  const auto traffic = Communicator::traffic();
  MetricsNumbers m;
  m.stage = stageIndex_;
  m.replica = dpRank_;
  m.steps = c.steps;
  m.logSteps = c.logSteps;
  m.syncsNonLog = c.syncsNonLog;
  m.syncsLog = c.syncsLog;
  m.maxSyncsNonLog = c.maxSyncsNonLog;
  m.seconds = c.seconds;
  m.computeSeconds = ct.forwardSeconds + ct.backwardSeconds - c.computeAtStart;
  m.waitSeconds = traffic.waitSeconds - c.trafficAtStart.waitSeconds;
  m.sentBytes = traffic.sentBytes - c.trafficAtStart.sentBytes;
  m.receivedBytes = traffic.receivedBytes - c.trafficAtStart.receivedBytes;
  m.collectiveBytes = traffic.collectiveBytes - c.trafficAtStart.collectiveBytes;
  m.worker = workerCounts(worker_->metrics());
  m.transferCounting = !device_.is_cuda()            ? TransferCounting::CpuRun
                       : !transfers::hookInstalled() ? TransferCounting::Off
                                                     : TransferCounting::Counted;
  m.transfersAtStart = c.transfersAtStart;
  m.transfersNow = transfers::counts();
  return metricsReportText(m);
}

void TrainerImpl::report() {
  log::info(metricsReport());
  reportTrace();
  const auto measured = reportCompute();
  const auto predicted = reportPrediction();
  if (const auto terms = computeTermsLine(stageIndex_, measured, predicted); !terms.empty()) log::info(terms);
  const double measuredCompute = measured.computeSeconds;
  const int64_t resident = memory::residentPeakBytes();
  reportMemory(predicted, resident);
  reportRankTables(measuredCompute, predicted, resident);
  reportUtilisation();
  exportModel();
  if (metrics_) log::info("metrics: " + (fs::path(outDir_) / "metrics.jsonl").string());
  world_.barrier();
  log::closeFile();
}

void TrainerImpl::reportTrace() {
  if (!c_.logging.trace) return;
  std::string steps;
  for (auto s : tracedSteps_) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
  // On a GPU the process names its device; its action events are the host's
  // view (when work was enqueued and waited for); the kernels' own times are
  // on the kernels stream (logging.trace_ops).
  const auto timeline = writeTimeline(
      world_, trace_,
      "stage " + std::to_string(stageIndex_) + " / replica " + std::to_string(dpRank_) +
          (device_.is_cuda() ? " (" + device_.str() + ")" : ""),
      outDir_, stageIndex_, c_.pipeline.stages, plan_ ? &*plan_ : nullptr);
  for (const auto& line : deviceTraceLines_) log::info("stage " + std::to_string(stageIndex_) + " " + line);
  if (rank_ == 0) {
    log::info("trace: " + timeline.path + " (steps " + steps + "; open it in ui.perfetto.dev or chrome://tracing)");
    log::info(timeline.summary);
    if (c_.logging.traceOps) {
      log::info("timeline: with logging.trace_ops the traced steps also ran LibTorch's profiler, and the measured"
                " times include its cost per op; set logging.trace_ops: false for undisturbed times");
    }
  }
}

ComputeMedians TrainerImpl::reportCompute() {
  // Per pipeline rank: with interleaved stages, the sums over the rank's stages.
  log::info(compileLine(stageIndex_, choiceName(executionChoices(), c_.pipeline.execution),
                        workerCounts(worker_->metrics())));
  if (c_.pipeline.execution == ExecMode::Graphs) {  // Note [graphed stages]
    for (size_t i = 0; i < worker_->size(); ++i) {
      const auto& stage = worker_->stage(i);
      log::info("stage " + std::to_string(stage.stage().index) + " CUDA graphs: " +
                std::to_string(stage.graphsCaptured()) + " captured for " + std::to_string(stage.graphSlots()) +
                " micro-batch slots");
    }
  }
  std::vector<ComputeTotals> steps;
  for (const auto& t : stepCompute_) steps.push_back(computeTotals(t));
  const auto medians = computePerMicroBatch(computeTotals(warm_), steps, static_cast<int>(stages_.size()));
  log::info(computeLine(stageIndex_, medians, warmSteps_));
  return medians;
}

RankPrediction TrainerImpl::reportPrediction() const {
  if (!plan_) return {};
  std::vector<StagePrediction> mine;  // this rank's stages
  for (const auto& stage : stages_) mine.push_back(stagePrediction(plan_->stages.at(stage.index)));
  auto prediction = predictRank(mine);
  log::info(predictionLine(stageIndex_, prediction));
  return prediction;
}

void TrainerImpl::reportMemory(const RankPrediction& prediction, int64_t resident) {
  const int64_t predicted = prediction.peakBytes, window = prediction.windowBytes;
  char buf[600];
  if (savedBytes_) {
    log::info("stage " + std::to_string(stageIndex_) + " saved activations: peak " +
              std::to_string(savedBytes_->peakBytes()) + " bytes (" + formatBytes(savedBytes_->peakBytes()) +
              "; its inputs not counted: the plan holds them as boundary bytes)");
  }
  // Machine-readable on purpose: tests and bench/memory read this line.
  std::snprintf(buf, sizeof(buf),
                "memory: stage %d measured_peak_bytes=%lld predicted_peak_bytes=%lld outside_model_bytes=%lld "
                "resident_peak_bytes=%lld swap_window_bytes=%lld",
                stageIndex_, static_cast<long long>(modelPeak_), static_cast<long long>(predicted),
                static_cast<long long>(otherBytes_), static_cast<long long>(resident), static_cast<long long>(window));
  log::info(buf);
  for (size_t i = 0; i < worker_->size(); ++i) {
    const auto* mem = worker_->stage(i).memory();
    if (!mem) continue;
    const auto s = mem->stats();
    std::snprintf(buf, sizeof(buf),
                  "stage %d memory plan: swapped %s (%s%lld writes, %lld reads, %lld not prefetched in time, %lld "
                  "given back between Bi and W), swap stall %.3f s; recomputed %s in %lld re-runs, %.3f s",
                  worker_->stage(i).stage().index, formatBytes(s.swappedBytes).c_str(),
                  sharedSwapEngine_ ? "the rank's swap engine: " : "",
                  static_cast<long long>(s.swap.writes), static_cast<long long>(s.swap.reads),
                  static_cast<long long>(s.swap.demandReads), static_cast<long long>(s.swap.evictions),
                  s.swap.stallSeconds, formatBytes(s.recomputedBytes).c_str(), static_cast<long long>(s.recomputes),
                  s.recomputeSeconds);
    log::info(buf);
  }
}

void TrainerImpl::reportRankTables(double measuredCompute, const RankPrediction& prediction, int64_t resident) {
  const int64_t predicted = prediction.peakBytes;
  const double predictedCompute = prediction.computeSeconds;
  // Rank 0: the per-stage tables, predicted next to measured (compute in us).
  auto mine = torch::tensor({static_cast<int64_t>(stageIndex_), modelPeak_, predicted, resident,
                             static_cast<int64_t>(std::llround(1e6 * measuredCompute)),
                             static_cast<int64_t>(std::llround(1e6 * predictedCompute))},
                            torch::kInt64);
  auto all = torch::zeros({kRankReportColumns * world_.size()}, torch::kInt64);
  world_.allGather(mine, all);
  if (rank_ != 0) return;
  std::vector<RankReportRow> rows(static_cast<size_t>(world_.size()));
  const auto* v = all.data_ptr<int64_t>();
  for (auto& row : rows) {
    row = {v[0], v[1], v[2], v[3], v[4], v[5]};
    v += kRankReportColumns;
  }
  if (plan_) {
    log::info(rankComputeTable(rows, {warmSteps_, place_.localSize, threads_, hardwareCores(), device_.is_cpu()}));
  }
  log::info(rankMemoryTable(rows, otherBytes_));
}

// The model's work per step against what the ranks' matrix products reach
// together, measured now on every rank at once (core/Flops.h): how close to
// the machine's limit the run came. Collective.
void TrainerImpl::reportUtilisation() {
  const double forward = graph_ ? forwardFlops(*graph_, 0, graph_->numNodes()) : 0;
  world_.barrier();
  auto peak = torch::tensor({measureMatmulRate(device_, setup_.computeType, 0.3)}, torch::kDouble);
  world_.allReduce(peak);
  if (rank_ != 0 || counters_.steps == 0 || forward <= 0) return;
  const double model = 3 * forward * c_.pipeline.microbatches * c_.pipeline.dataParallel;
  const double stepSeconds = counters_.seconds / static_cast<double>(counters_.steps);
  const double achieved = model / stepSeconds, limit = peak.item<double>();
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "utilisation: %.2f GFLOP of model work per step (3 x the forward's matrix products), %.1f GFLOP/s at "
                "%.3f s/step = %.0f%% of the %.1f GFLOP/s the %d ranks' %s matrix products reach (%d threads per "
                "rank; measured now, every rank at once)",
                model / 1e9, achieved / 1e9, stepSeconds, 100 * achieved / limit, limit / 1e9, world_.size(),
                choiceName(precisionChoices(), c_.training.precision), at::get_num_threads());
  log::info(buf);
}

std::string TrainerImpl::settingsTable() const {
  RunSettings s;
  s.stages = c_.pipeline.stages;
  s.dataParallel = c_.pipeline.dataParallel;
  s.microBatches = c_.pipeline.microbatches;
  s.microBatchSize = c_.training.microBatchSize;
  s.schedule = scheduleOf(c_, plan_ ? &*plan_ : nullptr).name;
  s.scheduleAuto = c_.pipeline.schedule.isAuto();
  s.chunks = chunks_;
  if (chunks_ > 1) s.placement = placement_.describe();
  s.graphNodes = graph_->numNodes();
  s.cuts = cuts_;
  s.execution = choiceName(executionChoices(), c_.pipeline.execution);
  s.memoryPolicy = choiceName(memory::memoryPolicies(), c_.memory.policy);
  s.budgetMb = c_.memory.budgetMb;
  s.hardLimit = c_.memory.hardLimit;
  s.threads = threads_;
  s.nodes = place_.nodes;
  s.host = place_.host;
  s.hostOfRank = place_.hostOfRank;
  s.blas = blasKind();
  s.libtorch = torchVersion();
  s.mpi = mpiLibraryVersion();
  return sluice::settingsTable(s);
}

}  // namespace sluice
