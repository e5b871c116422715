// train::gradientVerdict: the step's gradient verdict. Whether the update
// goes ahead (apply), is dropped (skip: the gradients are zeroed, the step
// marked skipped) or stops the job (fail), from whether any gradient of any
// rank is non-finite, training.nan_policy and fp16 loss scaling (Note [fp16
// loss scaling], optim/LossScaler.h). Every rank decides on the same
// all-reduced flag, so every rank takes the same branch. Under nan_policy
// abort without loss scaling the trainer does not read the flag at once
// (Note [lazy nan check]): no verdict is asked then, and the update applies.
//
//   auto v = gradientVerdict(nonFinite, NanPolicy::Skip, scaler, step);
//   if (v.action == GradientVerdict::Action::Skip) warn(v.message);
#pragma once

#include <cstdint>
#include <string>

#include "config/Config.h"
#include "optim/LossScaler.h"

namespace sluice {

struct GradientVerdict {
  enum class Action { Apply, Skip, Fail };
  Action action = Action::Apply;
  std::string message;  // Skip: the warning (without the step); Fail: the error
  // Apply: the factor that unscales the gradients first (1 / the loss scale
  // the backward used), or 1 when they are not scaled.
  double unscale = 1;
};

// scaler: the job's loss scaler (fp16), or null; update()d here when given.
GradientVerdict gradientVerdict(bool nonFinite, NanPolicy policy, optim::LossScaler* scaler, int64_t step);

}  // namespace sluice
