#include "telemetry/TraceFile.h"

#include <cmath>

namespace sluice {
namespace {

const char* kStreams[] = {"compute", "recv", "send", "io", "collective", "step"};
constexpr int kStreamCount = sizeof(kStreams) / sizeof(kStreams[0]);

// Thread ids: the fixed streams first, then any other stream (the device
// trace's ops, kernels and syncs) in order of first appearance.
class StreamIds {
 public:
  StreamIds() {
    for (int i = 0; i < kStreamCount; ++i) names_.push_back(kStreams[i]);
  }
  int operator()(const std::string& stream) {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == stream) return static_cast<int>(i);
    }
    names_.push_back(stream);
    return static_cast<int>(names_.size()) - 1;
  }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<std::string> names_;
};

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
  StreamIds streamId;
  for (const auto& e : events) streamId(e.stream);
  for (size_t i = 0; i < streamId.names().size(); ++i) {
    meta("thread_name", {{"name", streamId.names()[i]}}, static_cast<int>(i));
    meta("thread_sort_index", {{"sort_index", static_cast<int>(i)}}, static_cast<int>(i));
  }
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
