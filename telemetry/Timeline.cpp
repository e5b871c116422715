#include "telemetry/Timeline.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/Files.h"
#include "telemetry/TraceFile.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
constexpr int kRounds = 8;
constexpr int kTag = 15990;  // below the communicator's limit, above the pipeline's tags
// This rank's clock minus rank 0's, in microseconds (0 on rank 0).
double clockOffsetUs(const Communicator& world) {
  const TensorSpec one{{1}, torch::kDouble};
  double offset = 0;
  for (int r = 1; r < world.size(); ++r) {
    if (world.rank() == 0) {
      double best = std::numeric_limits<double>::infinity(), bestOffset = 0;
      for (int k = 0; k < kRounds; ++k) {
        const double t1 = TraceRecorder::nowUs();
        world.send(torch::tensor({t1}, torch::kDouble), r, kTag);
        const double tr = world.recv(one, r, kTag).tensor.item<double>();
        const double t2 = TraceRecorder::nowUs();
        if (t2 - t1 < best) {
          best = t2 - t1;
          bestOffset = tr - (t1 + t2) / 2;
        }
      }
      world.send(torch::tensor({bestOffset}, torch::kDouble), r, kTag + 1);
    } else if (world.rank() == r) {
      for (int k = 0; k < kRounds; ++k) {
        world.recv(one, 0, kTag);
        world.send(torch::tensor({TraceRecorder::nowUs()}, torch::kDouble), 0, kTag);
      }
      offset = world.recv(one, 0, kTag + 1).tensor.item<double>();
    }
  }
  return offset;
}

// Rank 0: the measured vs predicted table (see the header).
// The plan's busy time and bubble for pipeline rank s ("-" without a plan):
// its stages' (several under interleaved: s, s + stages, ...; zbv: s and 2 stages - 1 - s).
std::pair<std::string, std::string> predictedBusy(const partition::Plan* plan, int s, int stages) {
  if (!plan || s >= static_cast<int>(plan->stages.size()) || plan->stepTime <= 0) return {"-", "-"};
  double pb = 0;
  const auto placement = pipeline::placementOf(*plan->schedule, stages, plan->chunks);
  for (int k : placement.stagesOf(s)) pb += plan->microBatches * plan->stages[k].time * 1e3;
  char busy[32], bubble[32];
  std::snprintf(busy, sizeof(busy), "%.2f", pb);
  std::snprintf(bubble, sizeof(bubble), "%.1f%%", 100 * (1 - pb / (plan->stepTime * 1e3)));
  return {busy, bubble};
}

// This rank's part of the summary: four numbers per traced step (the fourth: its stage).
torch::Tensor tracedStepSpans(const TraceRecorder& trace, double offset, int stage) {
  // Per traced step: [step start, end of the last forward/backward, busy], on rank 0's clock, in us.
  const std::vector<TraceEvent> events = trace.events();
  std::vector<int64_t> steps;
  for (const auto& e : events) {
    if (e.stream == "step") steps.push_back(e.step);
  }
  const int n = static_cast<int>(steps.size());
  auto mine = torch::zeros({n * 4}, torch::kDouble);
  auto m = mine.accessor<double, 1>();
  for (int i = 0; i < n; ++i) {
    m[i * 4 + 3] = stage;
    for (const auto& e : events) {
      if (e.step != steps[i]) continue;
      if (e.stream == "step") m[i * 4] = e.startUs - offset;
      if (e.category == "compute" && e.microBatch >= 0) {
        m[i * 4 + 1] = std::max(m[i * 4 + 1], e.startUs + e.durUs - offset);
        m[i * 4 + 2] += e.durUs;
      }
    }
  }
  return mine;
}

// The table itself: n traced steps, the pipeline window in ms per step, and
// per stage the busy us summed over its ranks' steps (count: how many).
std::string timelineTable(int n, double window, const std::vector<double>& busy, const std::vector<double>& count,
                          int stages, const partition::Plan* plan) {
  std::ostringstream os;
  char line[200];
  os << "timeline: measured over " << n << " traced step" << (n > 1 ? "s" : "") << " (pipeline window "
     << std::fixed;
  os.precision(2);
  os << window << " ms per step";
  if (plan) os << ", predicted " << plan->stepTime * 1e3 << " ms";
  os << ")\n";
  std::snprintf(line, sizeof(line), "  %5s %9s %9s %8s %15s %16s\n", "stage", "busy ms", "idle ms", "bubble",
                "predicted busy", "predicted bubble");
  os << line;
  double busyAll = 0;
  for (int s = 0; s < stages; ++s) {
    const double b = count[s] > 0 ? busy[s] / count[s] / 1e3 : 0;
    busyAll += b;
    const auto [predicted, predictedBubble] = predictedBusy(plan, s, stages);
    std::snprintf(line, sizeof(line), "  %5d %9.2f %9.2f %7.1f%% %15s %16s\n", s, b, window - b,
                  window > 0 ? 100 * (1 - b / window) : 0.0, predicted.c_str(), predictedBubble.c_str());
    os << line;
  }
  std::snprintf(line, sizeof(line), "  bubble (all stages) %.1f%%", window > 0 ? 100 * (1 - busyAll / (stages * window)) : 0.0);
  os << line;
  if (plan) {
    std::snprintf(line, sizeof(line), ", predicted %.1f%%", 100 * plan->bubbleFraction);
    os << line;
  }
  os << "\n";
  return os.str();
}

std::string summarize(const Communicator& world, const TraceRecorder& trace, double offset, int stage,
                      int stages, const partition::Plan* plan) {
  auto mine = tracedStepSpans(trace, offset, stage);
  const int n = static_cast<int>(mine.numel() / 4);
  auto all = torch::zeros({world.size() * n * 4}, torch::kDouble);
  world.allGather(mine, all);
  if (world.rank() != 0 || n == 0) return "";
  auto a = all.accessor<double, 1>();
  double windowSum = 0;
  std::vector<double> busy(stages, 0), count(stages, 0);
  for (int i = 0; i < n; ++i) {
    double start = std::numeric_limits<double>::infinity(), end = 0;
    for (int r = 0; r < world.size(); ++r) {
      start = std::min(start, a[(r * n + i) * 4]);
      end = std::max(end, a[(r * n + i) * 4 + 1]);
    }
    windowSum += end - start;
    for (int r = 0; r < world.size(); ++r) {
      const int s = static_cast<int>(a[(r * n + i) * 4 + 3]);
      busy[s] += a[(r * n + i) * 4 + 2];
      count[s] += 1;
    }
  }
  const double window = windowSum / n / 1e3;  // ms per step
  return timelineTable(n, window, busy, count, stages, plan);
}

}  // namespace

TimelineResult writeTimeline(const Communicator& world, const TraceRecorder& trace,
                             const std::string& processName, const std::string& outDir, int stage, int stages,
                             const partition::Plan* plan) {
  const double offset = clockOffsetUs(world);
  TimelineResult result;
  result.summary = summarize(world, trace, offset, stage, stages, plan);
  const int rank = world.rank();
  const auto events = traceProcessEvents(rank, processName, trace.events(), offset);
  const fs::path part = fs::path(outDir) / ("trace.rank_" + std::to_string(rank) + ".part");
  writeFileAtomically(part.string(), events.dump());
  world.barrier();
  std::string& path = result.path;
  if (rank == 0) {
    std::vector<nlohmann::ordered_json> parts;
    for (int r = 0; r < world.size(); ++r) {
      const fs::path p = fs::path(outDir) / ("trace.rank_" + std::to_string(r) + ".part");
      parts.push_back(nlohmann::ordered_json::parse(readFile(p.string())));
      fs::remove(p);
    }
    path = (fs::path(outDir) / "trace.json").string();
    writeFileAtomically(path, traceFileText(std::move(parts)));
  }
  world.barrier();
  return result;
}

}  // namespace sluice
