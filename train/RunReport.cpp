#include "train/RunReport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/Bytes.h"
#include "partition/Timing.h"

namespace sluice {

RankPrediction predictRank(const std::vector<StagePrediction>& stages) {
  RankPrediction p;
  auto& ps = p.together;
  for (const auto& one : stages) {
    ps.forward += one.forward;
    ps.backward += one.backward;
    ps.loss += one.loss;
    ps.recompute += one.recompute;
    ps.swap += one.swap;
    ps.refill += one.refill;
    ps.inFlight = std::max(ps.inFlight, one.inFlight);
    p.windowBytes = std::max(p.windowBytes, one.windowBytes);
    ps.keptBytes += one.keptBytes;
    // Several stages per rank: the plan's rank peak (their holdings peak at different moments).
    p.peakBytes = one.rankPeakBytes > 0 ? one.rankPeakBytes : p.peakBytes + one.peakBytes;
    p.savedPeakBytes += one.inFlight * one.keptBytes;
    p.computeSeconds += one.forward + one.backward + one.loss + one.recompute + one.swap + one.refill;
  }
  return p;
}

std::string predictionLine(int stage, const RankPrediction& prediction) {
  const auto& ps = prediction.together;
  char buf[600];
  std::snprintf(buf, sizeof(buf),
                "stage %d plan predicts: compute per micro-batch %.3f ms (forward %.3f, backward %.3f, loss %.3f, "
                "recompute %.3f, swap stall %.3f, refill after waits %.3f), saved activations peak %lld bytes (%d "
                "in flight x %lld kept)",
                stage, 1e3 * prediction.computeSeconds, 1e3 * ps.forward, 1e3 * ps.backward, 1e3 * ps.loss,
                1e3 * ps.recompute, 1e3 * ps.swap, 1e3 * ps.refill, static_cast<long long>(prediction.savedPeakBytes),
                ps.inFlight, static_cast<long long>(ps.keptBytes));
  return buf;
}

ComputeMedians computePerMicroBatch(const ComputeTotals& warm, const std::vector<ComputeTotals>& steps,
                                    int stagesOnRank) {
  // Micro-batches timed: each went through every stage of the rank.
  std::vector<double> fwd, bwd, both;
  ComputeMedians m;
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto& before = k == 0 ? warm : steps[k - 1];
    const auto& after = steps[k];
    const int64_t mbs = (after.forwards - before.forwards) / static_cast<int64_t>(stagesOnRank);
    if (mbs <= 0) continue;
    m.microBatches += mbs;
    fwd.push_back((after.forwardSeconds - before.forwardSeconds) / mbs);
    bwd.push_back((after.backwardSeconds - before.backwardSeconds) / mbs);
    both.push_back(fwd.back() + bwd.back());
  }
  m.steps = static_cast<int64_t>(fwd.size());
  m.forwardSeconds = partition::median(fwd);
  m.backwardSeconds = partition::median(bwd);
  m.computeSeconds = partition::median(both);
  return m;
}

std::string computeTermsLine(int stage, const ComputeMedians& measured, const RankPrediction& predicted) {
  if (predicted.computeSeconds <= 0) return "";
  const auto& ps = predicted.together;
  const double forward = ps.forward + ps.loss, backward = ps.backward + ps.recompute + ps.swap;
  auto off = [](double m, double p) { return p > 0 ? std::fabs(m - p) / p : 0.0; };
  const bool forwardFurther = off(measured.forwardSeconds, forward) >= off(measured.backwardSeconds, backward);
  char buf[600];
  std::snprintf(buf, sizeof(buf),
                "stage %d compute against the plan: forward (with the loss) %.3f ms measured, %.3f predicted (%s); "
                "backward (with recompute and swap stalls) %.3f ms measured, %.3f predicted (%s); refill after "
                "waits %.3f ms predicted, in either; furthest off: the %s",
                stage, 1e3 * measured.forwardSeconds, 1e3 * forward, percentOff(measured.forwardSeconds, forward).c_str(),
                1e3 * measured.backwardSeconds, 1e3 * backward, percentOff(measured.backwardSeconds, backward).c_str(),
                1e3 * ps.refill, forwardFurther ? "forward" : "backward");
  return buf;
}

std::string computeLine(int stage, const ComputeMedians& medians, int64_t warmSteps) {
  char buf[600];
  std::snprintf(buf, sizeof(buf),
                "stage %d compute per micro-batch: %.3f ms (forward %.3f ms, backward %.3f ms; medians over %lld steps, "
                "%lld micro-batches, after %lld warm-up steps)",
                stage, 1e3 * medians.computeSeconds, 1e3 * medians.forwardSeconds, 1e3 * medians.backwardSeconds,
                static_cast<long long>(medians.steps), static_cast<long long>(medians.microBatches),
                static_cast<long long>(warmSteps));
  return buf;
}

std::string compileLine(int stage, const std::string& execution, const WorkerCounts& worker) {
  char buf[600];
  std::snprintf(buf, sizeof(buf), "stage %d %s: %lld compiles, %lld cache hits, compile %.3f s, execute %.3f s", stage,
                execution.c_str(), static_cast<long long>(worker.compiles), static_cast<long long>(worker.cacheHits),
                worker.compileSeconds, worker.executeSeconds);
  return buf;
}

std::string transferLine(TransferCounting counting, const TransferCounts& start, const TransferCounts& now,
                         double steps) {
  if (counting == TransferCounting::CpuRun) return "host<->device copies: none (job.device: cpu)";
  if (counting == TransferCounting::Off) return "host<->device copies: not counted (logging.transfer_guard: off)";
  auto per = [&](int64_t a, int64_t b) { return static_cast<double>(b - a) / steps; };
  auto scope = [&](TransferScope::Kind kind) {
    const auto k = static_cast<int>(kind);
    return per(start.copiesByScope[k], now.copiesByScope[k]);
  };
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "host<->device copies per step: host->device %.1f (%s), device->host %.1f (%s); of them data %.1f, "
                "communicator staging %.1f, swap %.1f, log reads %.1f; round trips inside steps: %lld",
                per(start.copies[0], now.copies[0]),
                formatBytes(static_cast<int64_t>(per(start.bytes[0], now.bytes[0]))).c_str(),
                per(start.copies[1], now.copies[1]),
                formatBytes(static_cast<int64_t>(per(start.bytes[1], now.bytes[1]))).c_str(),
                scope(TransferScope::Kind::Data), scope(TransferScope::Kind::Comm), scope(TransferScope::Kind::Swap),
                scope(TransferScope::Kind::LogRead), static_cast<long long>(now.roundTrips - start.roundTrips));
  return buf;
}

std::string metricsReportText(const MetricsNumbers& m) {
  const double n = std::max<int64_t>(1, m.steps);
  const double compute = m.computeSeconds / n * 1e3, wait = m.waitSeconds / n * 1e3, step = m.seconds / n * 1e3;
  const int64_t nonLog = m.steps - m.logSteps;
  auto perStep = [&](int64_t bytes) { return formatBytes(static_cast<int64_t>(bytes / n)); };
  char buf[600];
  std::snprintf(buf, sizeof(buf),
                "metrics report (stage %d, replica %d; %lld steps)\n"
                "  compiles %lld, cache hits %lld, recompiles %zu\n"
                "  per step: %.2f ms = compute %.2f ms (forwards and backwards) + waiting on communication %.2f ms + "
                "other host work %.2f ms\n"
                "  traffic per step: sent %s, received %s (point to point), collectives %s\n"
                "  host syncs (reads of training tensors) per step: %.2f on %lld non-log steps (at most %lld), %.2f on "
                "%lld log steps",
                m.stage, m.replica, static_cast<long long>(m.steps), static_cast<long long>(m.worker.compiles),
                static_cast<long long>(m.worker.cacheHits), m.worker.recompileCauses.size(), step, compute, wait,
                std::max(0.0, step - compute - wait), perStep(m.sentBytes).c_str(), perStep(m.receivedBytes).c_str(),
                perStep(m.collectiveBytes).c_str(), nonLog > 0 ? static_cast<double>(m.syncsNonLog) / nonLog : 0.0,
                static_cast<long long>(nonLog), static_cast<long long>(m.maxSyncsNonLog),
                m.logSteps > 0 ? static_cast<double>(m.syncsLog) / m.logSteps : 0.0,
                static_cast<long long>(m.logSteps));
  std::string out = buf;
  out += "\n  " + transferLine(m.transferCounting, m.transfersAtStart, m.transfersNow, n);
  for (auto& cause : m.worker.recompileCauses) out += "\n  recompiled: " + cause;
  return out;
}

std::string settingsTable(const RunSettings& s) {
  std::ostringstream os;
  auto row = [&](const std::string& k, const std::string& v) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "  %-22s %s\n", k.c_str(), v.c_str());
    os << buf;
  };
  std::string cutText;
  for (size_t i = 0; i < s.cuts.size(); ++i) cutText += (i ? ", " : "") + std::to_string(s.cuts[i]);
  os << "settings\n";
  row("world", std::to_string(s.stages * s.dataParallel) + " = stages " + std::to_string(s.stages) +
                   " x data_parallel " + std::to_string(s.dataParallel));
  const std::string schedule =
      s.schedule + (s.scheduleAuto ? " (auto)" : "") +
      (s.chunks > 1 ? ", " + std::to_string(s.chunks) + " stages per rank (" + s.placement + ")" : "");
  row("schedule", schedule + ", " + std::to_string(s.microBatches) + " micro-batches of " +
                      std::to_string(s.microBatchSize));
  row("graph", std::to_string(s.graphNodes) + " nodes, cuts at [" + cutText + "]");
  row("execution", s.execution);
  row("memory", "policy " + s.memoryPolicy + ", budget " +
                    (s.budgetMb > 0 ? formatBytes(static_cast<int64_t>(s.budgetMb * 1048576.0)) + " per stage" +
                                          (s.hardLimit ? " (hard limit)" : "")
                                    : std::string("none")));
  row("threads per rank",
      std::to_string(s.threads) + (s.nodes > 1 ? " on " + s.host + " (each host: its cores / its ranks)" : ""));
  std::vector<std::string> hosts;
  std::map<std::string, std::string> onHost;
  for (int r = 0; r < static_cast<int>(s.hostOfRank.size()); ++r) {
    const auto& h = s.hostOfRank[r];
    if (!onHost.count(h)) hosts.push_back(h);
    onHost[h] += " (stage " + std::to_string(r % s.stages) + ", replica " + std::to_string(r / s.stages) + ")";
  }
  for (auto& h : hosts) row("host " + h, onHost[h].substr(1));
  row("BLAS", s.blas);
  row("LibTorch", s.libtorch);
  row("MPI", s.mpi);
  return os.str();
}

std::string percentOff(double measured, double predicted) {
  return predicted > 0
             ? std::to_string(static_cast<int>(std::lround(100.0 * (measured - predicted) / predicted))) + "%"
             : std::string("-");
}

std::string rankComputeTable(const std::vector<RankReportRow>& rows, const ComputeContext& context) {
  char buf[200];
  // What the cost model's stage times are checked against (issue: within 10%).
  std::ostringstream os;
  os << "compute per micro-batch per rank (forward + backward + loss, median over the steps after "
     << context.warmSteps
     << " warm-up steps; predicted: the plan's cost model, with recompute, swap stall and refill after waits)\n";
  std::snprintf(buf, sizeof(buf), "%5s %6s %12s %12s %8s\n", "rank", "stage", "measured ms", "predicted ms", "error");
  os << buf;
  for (size_t r = 0; r < rows.size(); ++r) {
    const double meas = rows[r].computeUs / 1e3, pred = rows[r].predictedComputeUs / 1e3;
    std::snprintf(buf, sizeof(buf), "%5d %6lld %12.3f %12.3f %8s\n", static_cast<int>(r),
                  static_cast<long long>(rows[r].stage), meas, pred, percentOff(meas, pred).c_str());
    os << buf;
  }
  // Which term is off, and why (issue: compute within 5%, or say so): the
  // profile runs at most one rank per core; ranks that time-share cores
  // compute longer whenever several compute at once.
  const int wanted = context.ranksOnHost * context.threadsPerRank;
  if (wanted > context.cores && context.cpu) {
    char line[400];
    std::snprintf(line, sizeof(line),
                  "compute: this host runs %d ranks x %d threads on %d cores, so ranks that compute at the same "
                  "moment share cores, which the profile's ranks did not: compute runs longer than predicted, up "
                  "to %.2fx; the prediction holds with a core per rank thread\n",
                  context.ranksOnHost, context.threadsPerRank, context.cores,
                  static_cast<double>(wanted) / context.cores);
    os << line;
  }
  return os.str();
}

std::string rankMemoryTable(const std::vector<RankReportRow>& rows, int64_t bytesOutsideModel) {
  char buf[200];
  std::ostringstream os;
  os << "memory per rank (model peak: counting allocator, less " << formatBytes(bytesOutsideModel)
     << " outside the model on rank 0)\n";
  std::snprintf(buf, sizeof(buf), "%5s %6s %14s %14s %8s %14s\n", "rank", "stage", "measured", "predicted", "error",
                "resident");
  os << buf;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t meas = rows[r].modelPeakBytes, pred = rows[r].predictedPeakBytes;
    const std::string err = percentOff(static_cast<double>(meas), static_cast<double>(pred));
    std::snprintf(buf, sizeof(buf), "%5d %6lld %14s %14s %8s %14s\n", static_cast<int>(r),
                  static_cast<long long>(rows[r].stage), formatBytes(meas).c_str(),
                  pred > 0 ? formatBytes(pred).c_str() : "-", err.c_str(), formatBytes(rows[r].residentBytes).c_str());
    os << buf;
  }
  return os.str();
}

}  // namespace sluice
