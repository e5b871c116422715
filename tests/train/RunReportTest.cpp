// The end-of-run report (train/RunReport.h) on made-up inputs: the plan's
// prediction for a rank's stages, the compute medians per micro-batch, the
// compile, transfer and metrics lines, the settings table, and rank 0's
// tables (the error column, the rows without a prediction, the note on
// shared cores). The lines tests/cli, tests/cluster and bench/ read are
// compared whole.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "train/RunReport.h"

namespace sluice {
namespace {

// Two stages of one rank (interleaved): 4 ms and 6 ms of compute per micro-batch.
std::vector<StagePrediction> reportTwoStages(int64_t rankPeakBytes) {
  StagePrediction a, b;
  a.forward = 1e-3, a.backward = 2e-3, a.recompute = 0.5e-3, a.swap = 0.25e-3, a.refill = 0.25e-3;
  a.inFlight = 3, a.keptBytes = 100, a.peakBytes = 1000, a.windowBytes = 64;
  b.forward = 2e-3, b.backward = 3e-3, b.loss = 1e-3;
  b.inFlight = 2, b.keptBytes = 50, b.peakBytes = 500, b.windowBytes = 128;
  a.rankPeakBytes = b.rankPeakBytes = rankPeakBytes;
  return {a, b};
}

TEST(RunReport, PredictRankSumsTheStagesWithoutARankPeak) {
  const auto p = predictRank(reportTwoStages(0));
  EXPECT_EQ(p.peakBytes, 1500) << "no rank peak: the stages' peaks summed";
  EXPECT_EQ(p.windowBytes, 128) << "the largest window, counted once";
  EXPECT_NEAR(p.computeSeconds, 10e-3, 1e-12);
  EXPECT_NEAR(p.together.backward, 5e-3, 1e-12);
  EXPECT_EQ(p.together.inFlight, 3);
  EXPECT_EQ(p.together.keptBytes, 150);
  EXPECT_EQ(p.savedPeakBytes, 3 * 100 + 2 * 50);
  EXPECT_EQ(predictionLine(1, p),
            "stage 1 plan predicts: compute per micro-batch 10.000 ms (forward 3.000, backward 5.000, loss 1.000, "
            "recompute 0.500, swap stall 0.250, refill after waits 0.250), saved activations peak 400 bytes (3 in "
            "flight x 150 kept)");
}

TEST(RunReport, PredictRankTakesThePlansRankPeak) {
  const auto p = predictRank(reportTwoStages(1200));
  EXPECT_EQ(p.peakBytes, 1200) << "the stages' holdings peak at different moments: the plan's rank peak";
  EXPECT_EQ(p.windowBytes, 128);
  const auto none = predictRank({});
  EXPECT_EQ(none.peakBytes, 0);
  EXPECT_EQ(none.computeSeconds, 0);
}

// A rank of two stages: the totals before the timed steps and after each.
// Per micro-batch the steps take (forward, backward) 10+20, nothing (no
// micro-batch: left out), 30+30 and 20+10 ms.
const ComputeTotals kReportWarm{1.0, 2.0, 10};
const std::vector<ComputeTotals> kReportSteps = {
    {1.04, 2.08, 18},  // 4 micro-batches x 2 stages
    {6.04, 2.08, 18},  // no micro-batch (its 5 s count nowhere)
    {6.10, 2.14, 22},  // 2 micro-batches
    {6.18, 2.18, 30},  // 4 micro-batches
};

TEST(RunReport, ComputePerMicroBatchTakesMediansOverTheTimedSteps) {
  const auto m = computePerMicroBatch(kReportWarm, kReportSteps, 2);
  EXPECT_EQ(m.steps, 3);
  EXPECT_EQ(m.microBatches, 10);
  EXPECT_NEAR(m.forwardSeconds, 0.02, 1e-9);
  EXPECT_NEAR(m.backwardSeconds, 0.02, 1e-9);
  EXPECT_NEAR(m.computeSeconds, 0.03, 1e-9) << "the median of the sums, not the sum of the medians";
  EXPECT_EQ(computeLine(0, m, 2),
            "stage 0 compute per micro-batch: 30.000 ms (forward 20.000 ms, backward 20.000 ms; medians over 3 "
            "steps, 10 micro-batches, after 2 warm-up steps)");
  const auto one = computePerMicroBatch(kReportWarm, kReportSteps, 1);
  EXPECT_EQ(one.microBatches, 20) << "one stage per rank: every forward is a micro-batch";
  EXPECT_NEAR(one.computeSeconds, 0.015, 1e-9);
  const auto untimed = computePerMicroBatch(kReportWarm, {}, 2);
  EXPECT_EQ(untimed.steps, 0);
  EXPECT_EQ(untimed.computeSeconds, 0);
}

// The forward with the loss against its prediction, the backward with
// recompute and swap stalls against its; the gap names its term.
TEST(RunReport, ComputeTermsNameTheTermThatIsOff) {
  StagePrediction one;
  one.forward = 0.010, one.loss = 0.002, one.backward = 0.020, one.recompute = 0.003, one.swap = 0.001, one.refill = 0.0005;
  const auto predicted = predictRank({one});
  ComputeMedians measured;
  measured.forwardSeconds = 0.0126;   // +5% of 12 ms
  measured.backwardSeconds = 0.0264;  // +10% of 24 ms
  const auto line = computeTermsLine(3, measured, predicted);
  EXPECT_EQ(line,
            "stage 3 compute against the plan: forward (with the loss) 12.600 ms measured, 12.000 predicted (5%); "
            "backward (with recompute and swap stalls) 26.400 ms measured, 24.000 predicted (10%); refill after "
            "waits 0.500 ms predicted, in either; furthest off: the backward");
  measured.forwardSeconds = 0.0096;  // -20%
  EXPECT_NE(computeTermsLine(3, measured, predicted).find("(-20%)"), std::string::npos);
  EXPECT_NE(computeTermsLine(3, measured, predicted).find("furthest off: the forward"), std::string::npos);
  EXPECT_EQ(computeTermsLine(3, measured, RankPrediction{}), "") << "no plan, no comparison";
}

TEST(RunReport, CompileLineCountsTheWorkersCompiles) {
  WorkerCounts w;
  w.compiles = 3, w.cacheHits = 7, w.compileSeconds = 1.5, w.executeSeconds = 0.25;
  EXPECT_EQ(compileLine(2, "eager", w), "stage 2 eager: 3 compiles, 7 cache hits, compile 1.500 s, execute 0.250 s");
}

TEST(RunReport, TransferLineGivesCopiesPerStepByDirectionAndScope) {
  EXPECT_EQ(transferLine(TransferCounting::CpuRun, {}, {}, 1), "host<->device copies: none (job.device: cpu)");
  EXPECT_EQ(transferLine(TransferCounting::Off, {}, {}, 1),
            "host<->device copies: not counted (logging.transfer_guard: off)");
  TransferCounts start, now;
  start.copies[0] = 5, now.copies[0] = 25, now.copies[1] = 10;
  start.bytes[0] = 1024, now.bytes[0] = 21504, now.bytes[1] = 10240;
  const int64_t byScope[TransferScope::kKinds] = {7, 10, 6, 4, 2, 8};  // compute and set-up: not shown
  for (int k = 0; k < TransferScope::kKinds; ++k) now.copiesByScope[k] = byScope[k];
  start.roundTrips = 1, now.roundTrips = 3;
  EXPECT_EQ(transferLine(TransferCounting::Counted, start, now, 10),
            "host<->device copies per step: host->device 2.0 (2.00 KiB), device->host 1.0 (1.00 KiB); of them data "
            "1.0, communicator staging 0.6, swap 0.4, log reads 0.2; round trips inside steps: 2");
}

TEST(RunReport, MetricsReportSplitsTheStepAndCountsSyncs) {
  MetricsNumbers m;
  m.stage = 1, m.replica = 0, m.steps = 10, m.logSteps = 2, m.syncsLog = 6;
  m.seconds = 1.0, m.computeSeconds = 0.6, m.waitSeconds = 0.25;
  m.sentBytes = 10240, m.receivedBytes = 20480;
  m.worker.compiles = 2, m.worker.cacheHits = 5;
  m.worker.recompileCauses = {"input 'x' changed shape to [3, 4]"};
  const auto text = metricsReportText(m);
  EXPECT_EQ(text,
            "metrics report (stage 1, replica 0; 10 steps)\n"
            "  compiles 2, cache hits 5, recompiles 1\n"
            "  per step: 100.00 ms = compute 60.00 ms (forwards and backwards) + waiting on communication 25.00 ms + "
            "other host work 15.00 ms\n"
            "  traffic per step: sent 1.00 KiB, received 2.00 KiB (point to point), collectives 0 B\n"
            "  host syncs (reads of training tensors) per step: 0.00 on 8 non-log steps (at most 0), 3.00 on 2 log "
            "steps\n"
            "  host<->device copies: none (job.device: cpu)\n"
            "  recompiled: input 'x' changed shape to [3, 4]");
  // What tests/cli/quickstart.sh asks of it.
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(host syncs \(reads of training tensors\) per step: 0\.00 on )"
                                                 R"([1-9][0-9]* non-log steps \(at most 0\))")));
  m.transferCounting = TransferCounting::Off;
  EXPECT_NE(metricsReportText(m).find("\n  host<->device copies: not counted"), std::string::npos);
  const auto none = metricsReportText(MetricsNumbers{});
  EXPECT_NE(none.find("; 0 steps)"), std::string::npos) << none;
  EXPECT_NE(none.find("0.00 on 0 non-log steps (at most 0), 0.00 on 0 log steps"), std::string::npos) << none;
}

TEST(RunReport, SettingsTablePlacesTheStagesOnTheHosts) {
  RunSettings s;
  s.stages = 2, s.dataParallel = 2, s.microBatches = 4, s.microBatchSize = 8;
  s.schedule = "interleaved-1f1b", s.scheduleAuto = true, s.chunks = 2, s.placement = "looped";
  s.graphNodes = 120, s.cuts = {30, 60, 90};
  s.execution = "eager", s.memoryPolicy = "plan", s.budgetMb = 1.5, s.hardLimit = true;
  s.threads = 4, s.nodes = 2, s.host = "h2", s.hostOfRank = {"h2", "h2", "h3", "h3"};
  s.blas = "openblas", s.libtorch = "2.11.0", s.mpi = "Open MPI v4";
  EXPECT_EQ(settingsTable(s),
            "settings\n"
            "  world                  4 = stages 2 x data_parallel 2\n"
            "  schedule               interleaved-1f1b (auto), 2 stages per rank (looped), 4 micro-batches of 8\n"
            "  graph                  120 nodes, cuts at [30, 60, 90]\n"
            "  execution              eager\n"
            "  memory                 policy plan, budget 1.50 MiB per stage (hard limit)\n"
            "  threads per rank       4 on h2 (each host: its cores / its ranks)\n"
            "  host h2                (stage 0, replica 0) (stage 1, replica 0)\n"
            "  host h3                (stage 0, replica 1) (stage 1, replica 1)\n"
            "  BLAS                   openblas\n"
            "  LibTorch               2.11.0\n"
            "  MPI                    Open MPI v4\n");
}

TEST(RunReport, SettingsTableOnOneHostWithoutABudget) {
  RunSettings s;
  s.stages = 1, s.dataParallel = 2, s.microBatches = 4, s.microBatchSize = 8, s.schedule = "1f1b";
  s.placement = "unused with one stage per rank", s.memoryPolicy = "none", s.threads = 3;
  s.host = "b", s.hostOfRank = {"b", "a"};
  const auto table = settingsTable(s);
  EXPECT_NE(table.find("  schedule               1f1b, 4 micro-batches of 8\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  memory                 policy none, budget none\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  threads per rank       3\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("unused"), std::string::npos) << table;
  // Hosts in the order of their first rank, not by name.
  EXPECT_LT(table.find("  host b                 (stage 0, replica 0)\n"),
            table.find("  host a                 (stage 0, replica 1)\n"))
      << table;
  EXPECT_NE(table.find("  host a                 (stage 0, replica 1)\n"), std::string::npos) << table;
}

const std::vector<RankReportRow> kRows = {
    {0, 40 << 20, 38 << 20, 90 << 20, 10500, 10000},  // 5% over both predictions (memory: +5.3%)
    {1, 30 << 20, 0, 80 << 20, 9000, 0},              // no prediction
};

TEST(RunReport, PercentOffRoundsAndNeedsAPrediction) {
  EXPECT_EQ(percentOff(105, 100), "5%");
  EXPECT_EQ(percentOff(94.4, 100), "-6%");
  EXPECT_EQ(percentOff(3, 0), "-");
}

TEST(RunReport, ComputeTableHasARowPerRankAndSaysWhenCoresAreShared) {
  const auto alone = rankComputeTable(kRows, {3, 2, 1, 2, true});
  EXPECT_NE(alone.find("after 3 warm-up steps"), std::string::npos) << alone;
  EXPECT_NE(alone.find("    0      0       10.500       10.000       5%"), std::string::npos) << alone;
  EXPECT_NE(alone.find("    1      1        9.000        0.000        -"), std::string::npos) << alone;
  EXPECT_EQ(alone.find("share cores"), std::string::npos) << "2 ranks x 1 thread on 2 cores share none";
  const auto shared = rankComputeTable(kRows, {3, 3, 1, 2, true});
  EXPECT_NE(shared.find("3 ranks x 1 threads on 2 cores"), std::string::npos) << shared;
  EXPECT_NE(shared.find("up to 1.50x"), std::string::npos) << shared;
  EXPECT_EQ(rankComputeTable(kRows, {3, 3, 1, 2, false}).find("share cores"), std::string::npos)
      << "a GPU run's compute is not the host's cores'";
}

TEST(RunReport, MemoryTableComparesThePeakWithThePlan) {
  const auto table = rankMemoryTable(kRows, 4096);
  EXPECT_NE(table.find("less 4.00 KiB outside the model"), std::string::npos) << table;
  EXPECT_NE(table.find("5%"), std::string::npos) << table;
  // Rank 1 has no prediction: "-" in both the predicted and the error column.
  const auto row1 = table.substr(table.rfind("\n    1 "));
  EXPECT_EQ(row1.find("%"), std::string::npos) << row1;
}

}  // namespace
}  // namespace sluice
