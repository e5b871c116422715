// telemetry::TraceFile: trace events (core/Trace.h) as the Chrome trace-event
// format that Perfetto (ui.perfetto.dev), chrome://tracing and `sluice trace
// show` read; written by real runs (telemetry/Timeline.h, one part per rank)
// and by `sluice simulate --trace` (cli/Simulate.h).
//
// Layout: one process per rank (pid = rank), named and sorted by rank; one
// thread per stream (compute, recv, send, io, collective, step); complete
// events ("ph": "X", microseconds to the nanosecond) with the step and
// micro-batch in args. Torch-free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/Trace.h"

namespace sluice {

// One rank's events: the process's metadata, then its events shifted by
// -offsetUs (onto another clock).
nlohmann::ordered_json traceProcessEvents(int rank, const std::string& processName,
                                          const std::vector<TraceEvent>& events, double offsetUs = 0);

// The whole file's text: every rank's events in one traceEvents array.
std::string traceFileText(std::vector<nlohmann::ordered_json> ranks);

}  // namespace sluice
