// launcher::runWorker: what each rank of a training job runs.
//
// A Trainer's phases in order (launcher/Trainer.h): checks that the MPI world
// matches the config (world = stages x data_parallel), sets threads, writes
// the run outputs under job.output_dir (rank 0: config.resolved.yaml; every
// rank: logs/rank_N.log; the last stage: metrics.jsonl), captures and splits
// the model, and trains with the configured schedule and memory plan. Throws
// on error; the CLI reports it and stops all ranks.
#pragma once

#include "launcher/Config.h"

namespace sluice {

void runWorker(const Config& config);

// Threads each rank should use: config.job.threads_per_rank, else cores / ranks on this node.
int threadsForRank(const Config& config, int cores, int ranksOnNode);

}  // namespace sluice
