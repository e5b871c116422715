// The Trainer's report phase (train/Trainer.h): the metrics report, the
// settings table, and the end-of-run lines per rank (compiles, compute per
// micro-batch measured vs predicted, memory measured vs predicted, what the
// memory plan swapped and recomputed) with rank 0's per-rank tables.
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

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
#include "partition/Timing.h"

namespace sluice {
namespace fs = std::filesystem;

namespace {

// The metrics report's line on host<->device copies per step (Note [round
// trip]): by direction, which of them were Sluice's own (data, staging,
// swap) and how many round trips the guard found.
std::string transferLine(const TransferCounts& start, const TransferCounts& now, double steps, const c10::Device& device) {
  if (!device.is_cuda()) return "host<->device copies: none (job.device: cpu)";
  if (!transfers::hookInstalled()) return "host<->device copies: not counted (logging.transfer_guard: off)";
  auto per = [&](int64_t a, int64_t b) { return static_cast<double>(b - a) / steps; };
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "host<->device copies per step: host->device %.1f (%s), device->host %.1f (%s); of them data %.1f, "
                "communicator staging %.1f, swap %.1f, log reads %.1f; round trips inside steps: %lld",
                per(start.copies[0], now.copies[0]),
                formatBytes(static_cast<int64_t>(per(start.bytes[0], now.bytes[0]))).c_str(),
                per(start.copies[1], now.copies[1]),
                formatBytes(static_cast<int64_t>(per(start.bytes[1], now.bytes[1]))).c_str(),
                per(start.copiesByScope[1], now.copiesByScope[1]), per(start.copiesByScope[2], now.copiesByScope[2]),
                per(start.copiesByScope[3], now.copiesByScope[3]), per(start.copiesByScope[4], now.copiesByScope[4]),
                static_cast<long long>(now.roundTrips - start.roundTrips));
  return buf;
}

}  // namespace

std::string TrainerImpl::metricsReport() const {
  const auto& c = counters_;
  const auto sm = worker_->metrics();
  const auto ct = worker_->computeTimes();
  const auto traffic = Communicator::traffic();
  const double n = std::max<int64_t>(1, c.steps);
  const double compute = (ct.forwardSeconds + ct.backwardSeconds - c.computeAtStart) / n * 1e3;
  const double wait = (traffic.waitSeconds - c.trafficAtStart.waitSeconds) / n * 1e3;
  const double step = c.seconds / n * 1e3;
  const int64_t nonLog = c.steps - c.logSteps;
  char buf[600];
  std::snprintf(buf, sizeof(buf),
                "metrics report (stage %d, replica %d; %lld steps)\n"
                "  compiles %lld, cache hits %lld, recompiles %zu\n"
                "  per step: %.2f ms = compute %.2f ms (forwards and backwards) + waiting on communication %.2f ms + "
                "other host work %.2f ms\n"
                "  traffic per step: sent %s, received %s (point to point), collectives %s\n"
                "  host syncs (reads of training tensors) per step: %.2f on %lld non-log steps (at most %lld), %.2f on "
                "%lld log steps",
                stageIndex_, dpRank_, static_cast<long long>(c.steps), static_cast<long long>(sm.compiles),
                static_cast<long long>(sm.cacheHits), sm.recompileCauses.size(), step, compute, wait,
                std::max(0.0, step - compute - wait),
                formatBytes(static_cast<int64_t>((traffic.sentBytes - c.trafficAtStart.sentBytes) / n)).c_str(),
                formatBytes(static_cast<int64_t>((traffic.receivedBytes - c.trafficAtStart.receivedBytes) / n)).c_str(),
                formatBytes(static_cast<int64_t>((traffic.collectiveBytes - c.trafficAtStart.collectiveBytes) / n)).c_str(),
                nonLog > 0 ? static_cast<double>(c.syncsNonLog) / nonLog : 0.0, static_cast<long long>(nonLog),
                static_cast<long long>(c.maxSyncsNonLog),
                c.logSteps > 0 ? static_cast<double>(c.syncsLog) / c.logSteps : 0.0, static_cast<long long>(c.logSteps));
  std::string out = buf;
  out += "\n  " + transferLine(c.transfersAtStart, transfers::counts(), n, device_);
  for (auto& cause : sm.recompileCauses) out += "\n  recompiled: " + cause;
  return out;
}

void TrainerImpl::report() {
  log::info(metricsReport());
  reportTrace();
  const double measuredCompute = reportCompute();
  const auto predicted = reportPrediction();
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

double TrainerImpl::reportCompute() {
  // Per pipeline rank: with interleaved stages, the sums over the rank's stages.
  const auto sm = worker_->metrics();
  char buf[600];
  std::snprintf(buf, sizeof(buf), "stage %d %s: %lld compiles, %lld cache hits, compile %.3f s, execute %.3f s",
                stageIndex_, choiceName(executionChoices(), c_.pipeline.execution), static_cast<long long>(sm.compiles),
                static_cast<long long>(sm.cacheHits), sm.compileSeconds, sm.executeSeconds);
  log::info(buf);
  // Micro-batches timed: each went through every stage of the rank. Per
  // micro-batch: the median over timed steps of the step's compute over its
  // micro-batches (stepCompute_).
  const int64_t stepsTimed = static_cast<int64_t>(stepCompute_.size());
  std::vector<double> fwd, bwd, both;
  int64_t mbsTimed = 0;
  for (int64_t k = 0; k < stepsTimed; ++k) {
    const auto& before = k == 0 ? warm_ : stepCompute_[k - 1];
    const auto& after = stepCompute_[k];
    const int64_t mbs = (after.forwards - before.forwards) / static_cast<int64_t>(stages_.size());
    if (mbs <= 0) continue;
    mbsTimed += mbs;
    fwd.push_back((after.forwardSeconds - before.forwardSeconds) / mbs);
    bwd.push_back((after.backwardSeconds - before.backwardSeconds) / mbs);
    both.push_back(fwd.back() + bwd.back());
  }
  const double measuredCompute = partition::median(both);
  std::snprintf(buf, sizeof(buf),
                "stage %d compute per micro-batch: %.3f ms (forward %.3f ms, backward %.3f ms; medians over %lld steps, "
                "%lld micro-batches, after %lld warm-up steps)",
                stageIndex_, 1e3 * measuredCompute, 1e3 * partition::median(fwd), 1e3 * partition::median(bwd),
                static_cast<long long>(fwd.size()), static_cast<long long>(mbsTimed),
                static_cast<long long>(warmSteps_));
  log::info(buf);
  return measuredCompute;
}

TrainerImpl::RankPrediction TrainerImpl::reportPrediction() const {
  int64_t predicted = 0, window = 0;  // window: the swap window the prediction counts whole (one per rank)
  double predictedCompute = 0;  // seconds per micro-batch, the rank's stages
  if (plan_) {
    char buf[600];
    partition::PlanStage ps;  // this rank's stages together
    int64_t savedPeak = 0;
    for (auto& mine : stages_) {
      const auto& one = plan_->stages.at(mine.index);
      ps.forward += one.forward;
      ps.backward += one.backward;
      ps.loss += one.loss;
      ps.recompute += one.recompute;
      ps.swap += one.swap;
      ps.refill += one.refill;
      ps.inFlight = std::max(ps.inFlight, one.inFlight);
      window = std::max(window, one.windowBytes);
      ps.keptBytes += one.keptBytes;
      // Several stages per rank: the plan's rank peak (their holdings peak at different moments).
      predicted = one.rankPeakBytes > 0 ? one.rankPeakBytes : predicted + one.peakBytes;
      savedPeak += one.inFlight * one.keptBytes;
      predictedCompute += one.forward + one.backward + one.loss + one.recompute + one.swap + one.refill;
    }
    std::snprintf(buf, sizeof(buf),
                  "stage %d plan predicts: compute per micro-batch %.3f ms (forward %.3f, backward %.3f, loss %.3f, "
                  "recompute %.3f, swap stall %.3f, refill after waits %.3f), saved activations peak %lld bytes (%d "
                  "in flight x %lld kept)",
                  stageIndex_, 1e3 * predictedCompute, 1e3 * ps.forward, 1e3 * ps.backward, 1e3 * ps.loss,
                  1e3 * ps.recompute, 1e3 * ps.swap, 1e3 * ps.refill,
                  static_cast<long long>(savedPeak), ps.inFlight, static_cast<long long>(ps.keptBytes));
    log::info(buf);
  }
  return {predicted, window, predictedCompute};
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
  std::ostringstream os;
  auto row = [&](const std::string& k, const std::string& v) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "  %-22s %s\n", k.c_str(), v.c_str());
    os << buf;
  };
  std::string cutText;
  for (size_t i = 0; i < cuts_.size(); ++i) cutText += (i ? ", " : "") + std::to_string(cuts_[i]);
  os << "settings\n";
  row("world", std::to_string(c_.worldSize()) + " = stages " + std::to_string(c_.pipeline.stages) +
                   " x data_parallel " + std::to_string(c_.pipeline.dataParallel));
  const std::string schedule =
      scheduleOf(c_, plan_ ? &*plan_ : nullptr).name + (c_.pipeline.schedule.isAuto() ? " (auto)" : "") +
      (chunks_ > 1 ? ", " + std::to_string(chunks_) + " stages per rank (" + placement_.describe() + ")" : "");
  row("schedule", schedule + ", " + std::to_string(c_.pipeline.microbatches) + " micro-batches of " +
                      std::to_string(c_.training.microBatchSize));
  row("graph", std::to_string(graph_->numNodes()) + " nodes, cuts at [" + cutText + "]");
  row("execution", choiceName(executionChoices(), c_.pipeline.execution));
  const std::string policy = choiceName(memory::memoryPolicies(), c_.memory.policy);
  std::string memoryText = "policy " + policy + ", budget " +
                           (c_.memory.budgetMb > 0 ? formatBytes(static_cast<int64_t>(c_.memory.budgetMb * 1048576.0)) +
                                                         " per stage" + (c_.memory.hardLimit ? " (hard limit)" : "")
                                                   : std::string("none"));
  row("memory", memoryText);
  row("threads per rank", std::to_string(threads_) + (place_.nodes > 1 ? " on " + place_.host + " (each host: its cores / its ranks)" : ""));
  std::vector<std::string> hosts;
  std::map<std::string, std::string> onHost;
  for (int r = 0; r < static_cast<int>(place_.hostOfRank.size()); ++r) {
    const auto& h = place_.hostOfRank[r];
    if (!onHost.count(h)) hosts.push_back(h);
    onHost[h] += " (stage " + std::to_string(r % c_.pipeline.stages) + ", replica " +
                 std::to_string(r / c_.pipeline.stages) + ")";
  }
  for (auto& h : hosts) row("host " + h, onHost[h].substr(1));
  row("BLAS", blasKind());
  row("LibTorch", torchVersion());
  row("MPI", mpiLibraryVersion());
  return os.str();
}

}  // namespace sluice
