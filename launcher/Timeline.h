// launcher::Timeline: every rank's trace events (pipeline/Trace.h) merged
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
#include "pipeline/Trace.h"

namespace sluice {

// Returns the path written on rank 0 ("" on the others).
std::string writeTimeline(const Communicator& world, const pipeline::TraceRecorder& trace,
                          const std::string& processName, const std::string& outDir);

}  // namespace sluice
