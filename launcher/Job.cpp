#include "launcher/Job.h"

#include <algorithm>

#include "launcher/Trainer.h"

namespace sluice {

int threadsForRank(const Config& config, int cores, int ranksOnNode) {
  if (config.job.threadsPerRank > 0) return config.job.threadsPerRank;
  return std::max(1, cores / std::max(1, ranksOnNode));
}

void runWorker(const Config& config) { Trainer(config).run(); }

}  // namespace sluice
