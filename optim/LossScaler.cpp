#include "optim/LossScaler.h"

#include <cmath>
#include <cstdio>

#include "core/Error.h"

namespace sluice::optim {

bool isLossScale(double x) {
  int exponent = 0;
  // frexp gives x = 0.5 * 2^exponent exactly for a power of two.
  return std::isfinite(x) && x >= 1 && std::frexp(x, &exponent) == 0.5 && exponent <= 128;
}

std::string scaleText(double scale) {
  char text[64];
  std::snprintf(text, sizeof text, "%.0f", scale);
  return text;
}

LossScaler::LossScaler(double initial, int64_t window) : scale_(initial), window_(window) {
  SLUICE_CHECK(isLossScale(initial), OptimError,
               "loss scale " << initial << " is not a power of two >= 1 (65536 = 2^16 is the usual start)");
  SLUICE_CHECK(window >= 1, OptimError, "loss scale window " << window << " is not >= 1");
}

LossScaler::Outcome LossScaler::update(bool overflow) {
  if (!overflow) {
    if (++goodSteps_ >= window_) {
      goodSteps_ = 0;
      if (isLossScale(scale_ * 2)) scale_ *= 2;
    }
    return Outcome::Apply;
  }
  goodSteps_ = 0;
  if (scale_ <= 1) return Outcome::NonFinite;
  scale_ /= 2;
  return Outcome::BackOff;
}

void LossScaler::restore(double scale, int64_t goodSteps) {
  SLUICE_CHECK(isLossScale(scale), OptimError, "checkpoint's loss scale " << scale << " is not a power of two >= 1");
  SLUICE_CHECK(goodSteps >= 0, OptimError, "checkpoint's loss scale good-step count " << goodSteps << " is negative");
  scale_ = scale;
  goodSteps_ = goodSteps;
}

}  // namespace sluice::optim
