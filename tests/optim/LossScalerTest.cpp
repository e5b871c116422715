// fp16 loss scaling (Note [fp16 loss scaling], optim/LossScaler.h), the parts
// that do not need a GPU: the scaler's decisions, and the stage's backward
// seeded with the scale giving the unscaled gradients times the scale,
// bitwise (a power of two), under a fused and a split (zero-bubble) backward.
#include <gtest/gtest.h>

#include "core/Capture.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "optim/LossScaler.h"
#include "pipeline/StageWorker.h"
#include "tests/Ranks.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {

using Outcome = optim::LossScaler::Outcome;

SLUICE_TEST_RANKS("LossScaler.ScaledBackwardGivesTheGradientsTimesTheScaleBitwise", 1);

TEST(LossScaler, HalvesOnOverflowDoublesAfterAWindowAndStopsAtOne) {
  optim::LossScaler s(4, 3);
  EXPECT_EQ(s.update(false), Outcome::Apply);
  EXPECT_EQ(s.update(false), Outcome::Apply);
  EXPECT_EQ(s.scale(), 4);
  EXPECT_EQ(s.goodSteps(), 2);
  EXPECT_EQ(s.update(false), Outcome::Apply);  // the third in a row
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.goodSteps(), 0);
  EXPECT_EQ(s.update(false), Outcome::Apply);
  EXPECT_EQ(s.update(true), Outcome::BackOff);  // resets the run of good steps
  EXPECT_EQ(s.scale(), 4);
  EXPECT_EQ(s.goodSteps(), 0);
  EXPECT_EQ(s.update(true), Outcome::BackOff);
  EXPECT_EQ(s.update(true), Outcome::BackOff);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_EQ(s.update(true), Outcome::NonFinite);  // nothing left to lower
  EXPECT_EQ(s.scale(), 1);
  s.restore(65536, 2);
  EXPECT_EQ(s.update(false), Outcome::Apply);
  EXPECT_EQ(s.scale(), 131072);
}

TEST(LossScaler, RefusesScalesThatAreNotPowersOfTwo) {
  EXPECT_TRUE(optim::isLossScale(1));
  EXPECT_TRUE(optim::isLossScale(65536));
  EXPECT_FALSE(optim::isLossScale(0.5));
  EXPECT_FALSE(optim::isLossScale(3000));
  EXPECT_FALSE(optim::isLossScale(std::ldexp(1.0, 200)));  // beyond float's range
  EXPECT_THROW(optim::LossScaler(3, 10), OptimError);
  EXPECT_THROW(optim::LossScaler(8, 0), OptimError);
  optim::LossScaler s(8, 10);
  EXPECT_THROW(s.restore(12, 0), OptimError);
  EXPECT_THROW(s.restore(8, -1), OptimError);
}

// One step of a 1-stage tiny GPT (dropout on) under `schedule`: the loss and
// every parameter's gradient, with the backward seeded by `scale`.
std::pair<double, std::vector<torch::Tensor>> gradients(const std::string& schedule, double scale) {
  torch::manual_seed(7);
  auto options = test::tinyGpt(2);
  options.dropout = 0.1;
  models::Gpt gpt(options);
  auto graph = test::captureGpt(gpt, 2, 8);
  auto stage = splitGraph(graph, {}).at(0);
  pipeline::StageWorker worker(stage, tensorsByName(*gpt, stage.paramInputs), test::world(),
                               pipeline::makeSchedule(schedule, 1, 2), test::tokenCrossEntropy);
  worker.setLossScale(scale);
  auto gen = at::detail::createCPUGenerator(11);
  auto tokens = torch::randint(0, 64, {4, 9}, gen, torch::kLong);
  std::vector<pipeline::MicroBatch> mbs;
  for (int i = 0; i < 2; ++i) {
    auto rows = tokens.slice(0, 2 * i, 2 * i + 2);
    mbs.push_back({rows.slice(1, 0, 8).contiguous(), rows.slice(1, 1, 9).contiguous(), RandomKey{7, 0, i}});
  }
  const double loss = worker.runMicroBatches(mbs).item<double>();
  std::vector<torch::Tensor> grads;
  for (auto& p : worker.trainableParameters()) grads.push_back(p.grad().clone());
  return {loss, grads};
}

TEST(LossScaler, ScaledBackwardGivesTheGradientsTimesTheScaleBitwise) {
  for (const std::string schedule : {"1f1b", "zb-h1"}) {
    auto [loss, plain] = gradients(schedule, 1);
    auto [scaledLoss, scaled] = gradients(schedule, 1024);
    EXPECT_EQ(loss, scaledLoss) << schedule << ": the reported loss is the unscaled one";
    ASSERT_EQ(plain.size(), scaled.size());
    ASSERT_FALSE(plain.empty());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_TRUE(torch::equal(scaled[i], plain[i] * 1024)) << schedule << ": parameter " << i;
      EXPECT_TRUE(torch::equal(scaled[i] / 1024, plain[i])) << schedule << ": parameter " << i;
    }
    EXPECT_GT(plain[0].abs().sum().item<double>(), 0) << schedule;
  }
}

}  // namespace
}  // namespace sluice
