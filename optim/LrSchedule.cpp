#include "optim/LrSchedule.h"

#include <cmath>

namespace sluice::optim {

double LrSchedule::at(int64_t step) const {
  if (warmupSteps > 0 && step < warmupSteps) return lr * static_cast<double>(step + 1) / warmupSteps;
  if (kind == LrScheduleKind::Constant) return lr;
  const int64_t decaySteps = std::max<int64_t>(1, totalSteps - warmupSteps);
  const double progress = std::min(1.0, static_cast<double>(step - warmupSteps) / decaySteps);
  return minLr + 0.5 * (lr - minLr) * (1.0 + std::cos(M_PI * progress));
}

void setLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace sluice::optim
