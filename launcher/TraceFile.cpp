#include "launcher/TraceFile.h"

#include <cmath>

namespace sluice {
namespace {

const char* kStreams[] = {"compute", "recv", "send", "io", "collective", "step"};
constexpr int kStreamCount = sizeof(kStreams) / sizeof(kStreams[0]);

int streamId(const std::string& stream) {
  for (int i = 0; i < kStreamCount; ++i) {
    if (stream == kStreams[i]) return i;
  }
  return 0;
}

}  // namespace

nlohmann::ordered_json traceProcessEvents(int rank, const std::string& processName,
                                          const std::vector<TraceEvent>& events, double offsetUs) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  auto meta = [&](const char* name, nlohmann::ordered_json args, int tid) {
    nlohmann::ordered_json e{{"name", name}, {"ph", "M"}, {"pid", rank}};
    if (tid >= 0) e["tid"] = tid;
    e["args"] = std::move(args);
    out.push_back(std::move(e));
  };
  meta("process_name", {{"name", processName}}, -1);
  meta("process_sort_index", {{"sort_index", rank}}, -1);
  for (int i = 0; i < kStreamCount; ++i) meta("thread_name", {{"name", kStreams[i]}}, i);
  for (const auto& e : events) {
    nlohmann::ordered_json args{{"step", e.step}};
    if (e.microBatch >= 0) args["micro_batch"] = e.microBatch;
    // Microseconds to the nanosecond: the viewers need no more.
    out.push_back({{"name", e.name},
                   {"cat", e.category},
                   {"ph", "X"},
                   {"pid", rank},
                   {"tid", streamId(e.stream)},
                   {"ts", std::round((e.startUs - offsetUs) * 1e3) / 1e3},
                   {"dur", std::round(e.durUs * 1e3) / 1e3},
                   {"args", std::move(args)}});
  }
  return out;
}

std::string traceFileText(std::vector<nlohmann::ordered_json> ranks) {
  nlohmann::ordered_json all{{"displayTimeUnit", "ms"}, {"traceEvents", nlohmann::ordered_json::array()}};
  for (auto& part : ranks) {
    for (auto& e : part) all["traceEvents"].push_back(std::move(e));
  }
  return all.dump() + "\n";
}

}  // namespace sluice
