// Learning-rate schedules: a pure function of the step.
//
// lr(step): linear warm-up from lr/warmup to lr over `warmupSteps` steps,
// then constant, or a cosine decay to minLr at `totalSteps`.
#pragma once

#include <cstdint>
#include <string>

#include <torch/optim/optimizer.h>

#include "optim/OptimizerChoices.h"

namespace sluice::optim {

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double lr = 1e-3;
  double minLr = 0.0;
  int64_t warmupSteps = 0;
  int64_t totalSteps = 1;

  double at(int64_t step) const;  // step is 0-based
};

// Sets every parameter group's lr (works for Adam, AdamW and SGD options).
void setLearningRate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace sluice::optim
