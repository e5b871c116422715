// cli::Simulate: `sluice simulate`, a cluster's step before the cluster
// exists; no rank is started (docs/planning.md, "Plan a cluster you have not
// rented yet").
//
// Two inputs:
//   - CONFIG and --profile (from `sluice profile`, of the same model and
//     micro-batch size): the config's pipeline and memory sections describe
//     the cluster (pipeline.stages ranks, pipeline.microbatches,
//     pipeline.schedule, pipeline.chunks, pipeline.data_parallel,
//     memory.budget_mb), overridden by --ranks, --micro-batches, --schedule,
//     --chunks, --memory-gb and --set; the hardware by --link-gbps,
//     --latency-us, --collective-gbps and --speed (the profile's times are
//     divided by it). Each schedule (auto: every candidate of
//     pipeline.schedule auto) is planned for that cluster by the partitioner,
//     memory plan included, then simulated on the plan's stage times;
//   - --stage-times F,B,W[;...] in ms with --ranks and --micro-batches (and
//     --transfer-ms, --chunks): the schedules on those times, no model.
// Prints the table of schedules (cli/SimulateReport.h), the fastest in
// detail (per rank, critical path) and, with --trace FILE, writes its step
// as a trace that `sluice trace show` draws. Errors: ConfigError (exit 2)
// for a bad flag or config, naming it.
#pragma once

#include "cli/CommandLine.h"

namespace sluice {

int runSimulate(const CommandLine& args);

}  // namespace sluice
