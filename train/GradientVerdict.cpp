#include "train/GradientVerdict.h"

namespace sluice {

GradientVerdict gradientVerdict(bool nonFinite, NanPolicy policy, optim::LossScaler* scaler, int64_t step) {
  using Action = GradientVerdict::Action;
  if (!scaler) {
    if (!nonFinite) return {};
    if (policy == NanPolicy::Skip) {
      return {Action::Skip, "non-finite gradients, update skipped (training.nan_policy skip)"};
    }
    return {Action::Fail, "step " + std::to_string(step) + ": gradients are not finite (NaN or inf); "
                          "training.nan_policy: skip drops such steps instead of stopping"};
  }
  const double used = scaler->scale();
  switch (scaler->update(nonFinite)) {
    case optim::LossScaler::Outcome::BackOff:
      return {Action::Skip, "gradients overflowed at loss scale " + optim::scaleText(used) +
                                ", update skipped; loss scale now " + optim::scaleText(scaler->scale())};
    case optim::LossScaler::Outcome::NonFinite:
      if (policy == NanPolicy::Skip) {
        return {Action::Skip, "non-finite gradients at loss scale 1, update skipped (training.nan_policy skip)"};
      }
      return {Action::Fail, "step " + std::to_string(step) +
                                ": gradients are not finite (NaN or inf) even at loss scale 1, so lowering the scale "
                                "cannot help (a non-finite forward, or float16's range exceeded: try bf16); "
                                "training.nan_policy: skip drops such steps instead of stopping"};
    case optim::LossScaler::Outcome::Apply:
      break;
  }
  return {Action::Apply, "", used != 1 ? 1 / used : 1.0};
}

}  // namespace sluice
