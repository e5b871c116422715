// The step's gradient verdict (train/GradientVerdict.h) on every branch:
// training.nan_policy with and without fp16 loss scaling.
#include <gtest/gtest.h>

#include "optim/LossScaler.h"
#include "train/GradientVerdict.h"

namespace sluice {
namespace {

using Action = GradientVerdict::Action;

TEST(GradientVerdict, FiniteGradientsApplyUnscaledWithoutAScaler) {
  for (auto policy : {NanPolicy::Abort, NanPolicy::Skip}) {
    const auto v = gradientVerdict(false, policy, nullptr, 3);
    EXPECT_EQ(v.action, Action::Apply);
    EXPECT_EQ(v.unscale, 1);
  }
}

TEST(GradientVerdict, NonFiniteGradientsSkipOrFailByThePolicy) {
  const auto skip = gradientVerdict(true, NanPolicy::Skip, nullptr, 3);
  EXPECT_EQ(skip.action, Action::Skip);
  EXPECT_EQ(skip.message, "non-finite gradients, update skipped (training.nan_policy skip)");
  const auto fail = gradientVerdict(true, NanPolicy::Abort, nullptr, 3);
  EXPECT_EQ(fail.action, Action::Fail);
  EXPECT_NE(fail.message.find("step 3: gradients are not finite"), std::string::npos) << fail.message;
}

TEST(GradientVerdict, ALossScalerUnscalesBacksOffAndFailsOnlyAtScaleOne) {
  optim::LossScaler scaler(1024, 2);
  auto v = gradientVerdict(false, NanPolicy::Abort, &scaler, 0);
  EXPECT_EQ(v.action, Action::Apply);
  EXPECT_EQ(v.unscale, 1.0 / 1024);
  // An overflow halves the scale and drops the update, under either policy.
  v = gradientVerdict(true, NanPolicy::Abort, &scaler, 1);
  EXPECT_EQ(v.action, Action::Skip);
  EXPECT_EQ(v.message, "gradients overflowed at loss scale 1024, update skipped; loss scale now 512");
  EXPECT_EQ(scaler.scale(), 512);
  // At scale 1 a non-finite gradient is the model's, not the scale's.
  optim::LossScaler one(1, 2);
  EXPECT_EQ(gradientVerdict(true, NanPolicy::Skip, &one, 2).action, Action::Skip);
  const auto fail = gradientVerdict(true, NanPolicy::Abort, &one, 2);
  EXPECT_EQ(fail.action, Action::Fail);
  EXPECT_NE(fail.message.find("even at loss scale 1"), std::string::npos) << fail.message;
  // Finite at scale 1: applied as they are.
  EXPECT_EQ(gradientVerdict(false, NanPolicy::Abort, &one, 3).unscale, 1);
}

}  // namespace
}  // namespace sluice
