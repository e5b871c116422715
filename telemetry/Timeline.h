// telemetry::Timeline: every rank's trace events (core/Trace.h) merged
// into one Chrome trace-event file, output_dir/trace.json, that opens in
// Perfetto (ui.perfetto.dev) and chrome://tracing.
//
// Clocks: rank 0 measures each rank's steady-clock offset by ping-pong over
// MPI (of 8 round trips, the fastest wins; the offset is the peer's time
// minus the midpoint of the round trip) and each rank shifts its events onto
// rank 0's clock. Layout: one process per rank, named "stage s / replica r"
// and sorted by rank; one thread per stream (compute, recv, send, step).
// Events are complete events ("ph": "X", microseconds) with the step and
// micro-batch in args. Collective over `world`: every rank calls it.
#pragma once

#include <string>

#include "core/Communicator.h"
#include "partition/Plan.h"
#include "core/Trace.h"

namespace sluice {

struct TimelineResult {
  std::string path;     // trace.json (rank 0; "" on the others)
  std::string summary;  // rank 0: measured busy, idle and bubble per stage, next to the plan's prediction
};

// `stage` and `stages`: this rank's pipeline stage and the stage count;
// `plan` (may be null): the predictions. Measured per traced step: the
// pipeline window runs from the step's start on the earliest rank to the end
// of the last forward or backward on any rank (the optimizer step after it is
// not pipeline time); a stage's busy time is the sum of its forwards and
// backwards, its bubble 1 - busy / window. Replicas of a stage are averaged.
TimelineResult writeTimeline(const Communicator& world, const TraceRecorder& trace,
                             const std::string& processName, const std::string& outDir, int stage, int stages,
                             const partition::Plan* plan);

}  // namespace sluice
