#include "cli/SimulateReport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/Error.h"
#include "core/Trace.h"
#include "telemetry/TraceFile.h"
#include "pipeline/ScheduleKinds.h"

namespace sluice {
namespace {

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", static_cast<double>(bytes) / 1048576.0);
  return text;
}

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", seconds * 1e3);
  return text;
}

double maxOf(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// "F0 s1" without the stage when one stage per rank.
std::string nameOf(const pipeline::Action& a, bool chunked) { return pipeline::traceNameOf(a, chunked).first; }

// The critical path as runs on one rank: "rank 2 [1.000 - 4.000 ms] F0 F1 B0".
std::vector<std::string> pathRuns(const SimulatedSchedule& s) {
  const auto path = pipeline::criticalPath(s.sim);
  const bool chunked = s.schedule.chunks() > 1;
  std::vector<std::string> runs;
  double previousEnd = 0;  // a run that starts with a wait starts on the path when the message leaves
  for (size_t i = 0; i < path.size();) {
    size_t j = i;
    std::ostringstream names;
    int shown = 0;
    for (; j < path.size() && path[j].first == path[i].first; ++j) {
      const auto& a = path[j].second.action;
      if (shown++ < 8) names << " " << (pipeline::isCompute(a) ? nameOf(a, chunked) : "(wait " + nameOf(a, chunked) + ")");
    }
    if (shown > 8) names << " ... (" << shown << " in all)";
    runs.push_back("rank " + std::to_string(path[i].first) + " [" + ms(std::max(path[i].second.start, previousEnd)) +
                   " - " + ms(path[j - 1].second.end) + " ms]" + names.str());
    previousEnd = path[j - 1].second.end;
    i = j;
  }
  return runs;
}

}  // namespace

SimulatedSchedule simulateSchedule(const SimulationInput& in) {
  SimulatedSchedule out;
  out.input = in;
  try {
    SLUICE_CHECK(in.schedule, ScheduleError, "simulate: no schedule given");
    const auto& kind = *in.schedule;
    const int stages = in.ranks * (kind.interleaves ? in.chunks : 1);
    SLUICE_CHECK(static_cast<int>(in.costs.times.size()) == stages, ScheduleError,
                 pipeline::scheduleLabel(kind, in.chunks) << " on " << in.ranks << " ranks has " << stages << " stages, but "
                                               << in.costs.times.size() << " stage times were given");
    const int chunks = kind.interleaves ? in.chunks : 1;
    out.schedule = pipeline::makeSchedule(kind, in.ranks, in.microBatches, chunks, in.fit ? &in.costs : nullptr);
    out.sim = pipeline::simulateStepOnCores(out.schedule, in.costs.times, in.costs.comm, in.refill, in.cores, in.waits);
    if (in.fit && kind.fitsStageTimes) {
      const auto unit = pipeline::makeSchedule(kind, in.ranks, in.microBatches, chunks, nullptr);
      out.unitStepTime =
          pipeline::simulateStepOnCores(unit, in.costs.times, in.costs.comm, in.refill, in.cores, in.waits).stepTime;
    }
    out.peakMicroBatches = pipeline::peakActivationMicroBatches(out.schedule);
  } catch (const ScheduleError& e) {
    out.failure = e.what();
  }
  return out;
}

SimulatedSchedule failedSchedule(const pipeline::ScheduleKind& schedule, int chunks, const std::string& why) {
  SimulatedSchedule out;
  out.input.schedule = &schedule;
  out.input.chunks = chunks;
  out.failure = why;
  return out;
}

const SimulatedSchedule* fastest(const std::vector<SimulatedSchedule>& all) {
  const SimulatedSchedule* best = nullptr;
  for (const auto& s : all) {
    if (s.failure.empty() && (!best || s.stepTime() < best->stepTime() * (1 - 1e-9))) best = &s;
  }
  return best;
}

std::string simulationTable(const std::vector<SimulatedSchedule>& all) {
  std::ostringstream os, failures;
  char line[256];
  std::snprintf(line, sizeof(line), "%-18s %12s %8s %14s %14s %13s\n", "schedule", "step ms", "bubble",
                "unit order ms", "peak act (mb)", "peak MiB");
  os << line;
  for (const auto& s : all) {
    const std::string name = pipeline::scheduleLabel(*s.input.schedule, s.input.chunks);
    if (!s.failure.empty()) {
      std::snprintf(line, sizeof(line), "%-18s %12s\n", name.c_str(), "-");
      os << line;
      failures << "  " << name << ": " << s.failure << "\n";
      continue;
    }
    const auto& peaks = s.input.rankPeakBytes;
    const std::string bytes = peaks.empty() ? "-" : mib(*std::max_element(peaks.begin(), peaks.end()));
    std::snprintf(line, sizeof(line), "%-18s %12s %7.2f%% %14s %14.1f %13s\n", name.c_str(), ms(s.stepTime()).c_str(),
                  100 * pipeline::bubbleRate(s.sim), s.unitStepTime > 0 ? ms(s.unitStepTime).c_str() : "-",
                  maxOf(s.peakMicroBatches), bytes.c_str());
    os << line;
  }
  if (const auto* best = fastest(all)) {
    os << "fastest: " << pipeline::scheduleLabel(*best->input.schedule, best->input.chunks) << ", " << ms(best->stepTime())
       << " ms per step\n";
  }
  if (failures.tellp() > 0) os << "not simulated:\n" << failures.str();
  return os.str();
}

std::string simulationDetail(const SimulatedSchedule& s) {
  std::ostringstream os;
  char line[256];
  const auto& in = s.input;
  os << pipeline::scheduleLabel(*in.schedule, in.chunks) << " on " << in.ranks << " ranks, " << in.microBatches << " micro-batches ("
     << s.schedule.placement().describe() << "), messages " << ms(in.costs.comm) << " ms";
  if (in.cores > 0 && in.cores < in.ranks) {
    os << ", the ranks sharing " << in.cores << " cores (Note [ranks sharing cores]: each receiver copies its messages"
       << (in.waits.firstNapSeconds > 0 ? "; a wait polls " + ms(in.waits.pollSeconds) + " ms, then sleeps" : "")
       << ")";
  }
  if (in.optimizerSeconds > 0) os << ", DistAdam's collectives " << ms(in.optimizerSeconds) << " ms after the pipeline";
  os << ":\n";
  std::snprintf(line, sizeof(line), "  %5s %12s %12s %8s %14s %10s\n", "rank", "busy ms", "idle ms", "bubble",
                "peak act (mb)", "peak MiB");
  os << line;
  for (int r = 0; r < static_cast<int>(s.sim.busy.size()); ++r) {
    const double busy = s.sim.busy[r], idle = s.sim.stepTime - busy;
    const std::string bytes = in.rankPeakBytes.empty() ? "-" : mib(in.rankPeakBytes.at(r));
    std::snprintf(line, sizeof(line), "  %5d %12s %12s %7.2f%% %14.1f %10s\n", r, ms(busy).c_str(), ms(idle).c_str(),
                  s.sim.stepTime > 0 ? 100 * idle / s.sim.stepTime : 0.0, s.peakMicroBatches.at(r), bytes.c_str());
    os << line;
  }
  if (in.budgetBytes > 0) os << "  memory per rank " << mib(in.budgetBytes) << " MiB: the plan fits it\n";
  const auto runs = pathRuns(s);
  os << "critical path (" << runs.size() << " runs on one rank; waits are messages in flight):\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs.size() > 24 && i == 12) {
      os << "  ... " << runs.size() - 24 << " runs ...\n";
      i = runs.size() - 12;
    }
    os << "  " << runs[i] << "\n";
  }
  return os.str();
}

std::string simulatedTrace(const SimulatedSchedule& s) {
  const bool chunked = s.schedule.chunks() > 1;
  std::vector<nlohmann::ordered_json> parts;
  for (int r = 0; r < static_cast<int>(s.sim.ranks.size()); ++r) {
    std::vector<TraceEvent> events;
    events.push_back({"step 0", "step", "step", 0, -1, 0, s.stepTime() * 1e6});
    for (const auto& x : s.sim.ranks[r]) {
      const auto [name, stream] = pipeline::traceNameOf(x.action, chunked);
      events.push_back({name, stream, stream, 0, x.action.microBatch, x.start * 1e6, (x.end - x.start) * 1e6});
    }
    parts.push_back(traceProcessEvents(r, "rank " + std::to_string(r) + " (simulated)", events));
  }
  return traceFileText(std::move(parts));
}

std::vector<pipeline::StageTimes> parseStageTimes(const std::string& text) {
  std::vector<pipeline::StageTimes> out;
  std::stringstream stages(text);
  std::string triple;
  while (std::getline(stages, triple, ';')) {
    std::stringstream fields(triple);
    std::string field;
    std::vector<double> v;
    while (std::getline(fields, field, ',')) {
      size_t used = 0;
      double x = -1;
      try {
        x = std::stod(field, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      const bool blank = field.find_first_not_of(" \t", used) == std::string::npos;
      SLUICE_CHECK(used > 0 && blank && std::isfinite(x) && x >= 0, ConfigError,
                   "sluice: simulate --stage-times: '" << field << "' in '" << triple
                                                       << "' is not a time in ms (a number >= 0)");
      v.push_back(x / 1e3);
    }
    SLUICE_CHECK(v.size() == 3, ConfigError,
                 "sluice: simulate --stage-times: '" << triple << "' has " << v.size()
                                                     << " values; each stage takes F,B,W (forward, input-gradient "
                                                        "backward, weight-gradient backward, ms)");
    out.push_back({v[0], v[1] + v[2], v[1], v[2]});
  }
  SLUICE_CHECK(!out.empty(), ConfigError, "sluice: simulate --stage-times: no stage times in '" << text << "'");
  return out;
}

}  // namespace sluice
