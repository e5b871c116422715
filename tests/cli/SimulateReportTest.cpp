// `sluice simulate`'s report (cli/SimulateReport.h) on explicit stage
// times: --stage-times parsing and its errors, the table (a schedule that
// cannot run is named with why), fitting against the unit-cost order, the
// detail's critical path, and a trace that `sluice trace show` draws with
// the simulated step time; the command line's simulate flags.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/Error.h"
#include "cli/CommandLine.h"
#include "cli/SimulateReport.h"
#include "telemetry/TimelineSvg.h"

namespace sluice {
namespace {

constexpr auto npos = std::string::npos;

SimulationInput uniform(const std::string& schedule, int ranks, int chunks, int m, pipeline::StageTimes t) {
  SimulationInput in;
  in.schedule = &pipeline::scheduleKind(schedule);
  in.ranks = ranks;
  in.chunks = chunks;
  in.microBatches = m;
  in.costs.times.assign(ranks * chunks, t);
  return in;
}

std::string parseError(const std::string& text) {
  try {
    parseStageTimes(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SimulateReport, StageTimesAreMillisecondsPerStage) {
  const auto one = parseStageTimes("1,2,0.5");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_DOUBLE_EQ(one[0].forward, 1e-3);
  EXPECT_DOUBLE_EQ(one[0].backward, 2.5e-3);
  EXPECT_DOUBLE_EQ(one[0].backwardInput, 2e-3);
  EXPECT_DOUBLE_EQ(one[0].backwardWeight, 0.5e-3);
  EXPECT_EQ(parseStageTimes("1,1,1; 2,2,2;3,3,3").size(), 3u);
  EXPECT_NE(parseError("1,2").find("'1,2' has 2 values"), npos);
  EXPECT_NE(parseError("1,x,2").find("'x' in '1,x,2' is not a time in ms"), npos);
  EXPECT_NE(parseError("1,-2,2").find("'-2'"), npos);
  EXPECT_NE(parseError("1,2,3z").find("'3z'"), npos);
  EXPECT_NE(parseError("1,2,inf").find("'inf'"), npos);
  EXPECT_NE(parseError("").find("no stage times"), npos);
}

TEST(SimulateReport, TheTableNamesWhatCannotRunAndWhy) {
  std::vector<SimulatedSchedule> all{simulateSchedule(uniform("1f1b", 4, 1, 8, {1, 2, 1, 1})),
                                     simulateSchedule(uniform("interleaved", 4, 2, 6, {0.5, 1, 0.5, 0.5}))};
  EXPECT_TRUE(all[0].failure.empty());
  EXPECT_NE(all[1].failure.find("multiple"), npos) << all[1].failure;  // 6 micro-batches on 4 ranks
  const auto table = simulationTable(all);
  EXPECT_NE(table.find("1f1b"), npos);
  EXPECT_NE(table.find("fastest: 1f1b, 33000.000 ms"), npos) << table;  // (8 + 3) x 3 s
  EXPECT_NE(table.find("not simulated:\n  interleaved x2: "), npos) << table;
  EXPECT_EQ(fastest(all), &all[0]);
  EXPECT_EQ(simulateSchedule(uniform("1f1b", 4, 1, 8, {1, 2, 1, 1})).peakMicroBatches,
            (std::vector<double>{4, 3, 2, 1}));
}

// Uneven stages (a slow last stage): zb-h1 fitted to the times is no slower
// than its unit-cost order, which the report shows beside it.
TEST(SimulateReport, FittedSchedulesShowTheUnitOrderBesideThem) {
  auto in = uniform("zb-h1", 4, 1, 8, {1, 2, 1, 1});
  in.costs.times[3] = {1, 8, 4, 4};
  const auto fitted = simulateSchedule(in);
  ASSERT_TRUE(fitted.failure.empty()) << fitted.failure;
  EXPECT_GT(fitted.unitStepTime, 0);
  EXPECT_LE(fitted.stepTime(), fitted.unitStepTime);
  in.fit = false;
  EXPECT_EQ(simulateSchedule(in).unitStepTime, 0);  // not fitted: nothing beside it
  EXPECT_EQ(simulateSchedule(uniform("1f1b", 4, 1, 8, {1, 2, 1, 1})).unitStepTime, 0);
}

TEST(SimulateReport, TheDetailFollowsTheCriticalPath) {
  auto in = uniform("1f1b", 2, 1, 1, {1, 2, 1, 1});
  in.costs.comm = 0.5;
  in.optimizerSeconds = 0.25;
  const auto s = simulateSchedule(in);
  EXPECT_DOUBLE_EQ(s.stepTime(), 7.25);
  const auto detail = simulationDetail(s);
  EXPECT_NE(detail.find("rank 0 [0.000 - 1000.000 ms] F0"), npos) << detail;
  EXPECT_NE(detail.find("rank 1 [1000.000 - 4500.000 ms] (wait recv activation 0) F0 B0"), npos) << detail;
  EXPECT_NE(detail.find("rank 0 [4500.000 - 7000.000 ms] (wait recv gradient 0) B0"), npos) << detail;
  EXPECT_NE(detail.find("DistAdam's collectives 250.000 ms"), npos) << detail;
}

TEST(SimulateReport, TheTraceIsDrawnLikeARealRun) {
  const auto s = simulateSchedule(uniform("zbv", 4, 2, 8, {0.001, 0.002, 0.001, 0.001}));  // seconds
  ASSERT_TRUE(s.failure.empty()) << s.failure;
  const std::string path = testing::TempDir() + "simulated_trace.json";
  std::ofstream(path) << simulatedTrace(s);
  SvgSize size;
  const std::string svg = timelineSvg(path, &size);
  EXPECT_EQ(size.height, 56 + 40 * 4 + 40);  // one row per rank
  char step[64];
  std::snprintf(step, sizeof(step), "step time %.2f ms", s.stepTime() * 1e3);
  EXPECT_NE(svg.find(step), npos) << svg.substr(0, 600);
  EXPECT_NE(svg.find("Bi7 s4"), npos);  // chunked names, as a real zbv run's
  EXPECT_NE(svg.find("rank 3 (simulated)"), npos);
}

std::string commandError(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    auto parsed = parseCommandLine(static_cast<int>(argv.size()), argv.data());
    EXPECT_EQ(parsed->command, "simulate");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SimulateReport, TheCommandLineTakesStageTimesWithoutAConfig) {
  EXPECT_EQ(commandError({"sluice", "simulate", "--stage-times", "1,2,1", "--ranks", "4", "--micro-batches", "8"}), "");
  EXPECT_NE(commandError({"sluice", "simulate"}).find("simulate needs a CONFIG file"), npos);
  EXPECT_NE(commandError({"sluice", "simulate", "c.yaml", "--ranks", "0"}).find("--ranks"), npos);
  EXPECT_NE(commandError({"sluice", "simulate", "c.yaml", "--speed", "-1"}).find("--speed"), npos);
  EXPECT_NE(commandError({"sluice", "train", "c.yaml", "--stage-times", "1,1,1"}).find("another command does"), npos);
}

}  // namespace
}  // namespace sluice
