// Model FLOPs counted from a captured graph's shapes equal the textbook
// count of the model's matrix products; the matrix-product rate is measured.
#include <gtest/gtest.h>

#include <cmath>

#include "core/Capture.h"
#include "core/Flops.h"
#include "models/Cnn.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {

// GPT forward: per layer 2 B T x 12 d^2 (qkv 3 d^2, projection d^2, MLP
// 2 x 4 d^2) + attention 2 x 2 B T^2 d (q k^T and the weights times v over
// all heads); then the head, 2 B T d V.
TEST(Flops, GptForwardIsItsMatrixProducts) {
  torch::manual_seed(0);
  const auto o = test::tinyGpt(3);
  models::Gpt gpt(o);
  const double B = 2, T = 8, d = static_cast<double>(o.embd), V = static_cast<double>(o.vocabSize);
  const auto g = test::captureGpt(gpt, 2, 8);
  const double expected = o.layers * (24 * B * T * d * d + 4 * B * T * T * d) + 2 * B * T * d * V;
  EXPECT_DOUBLE_EQ(forwardFlops(g, 0, g.numNodes()), expected);
  // A range counts its own nodes: the halves add up to the whole.
  const int half = g.numNodes() / 2;
  EXPECT_DOUBLE_EQ(forwardFlops(g, 0, half) + forwardFlops(g, half, g.numNodes()), expected);
  EXPECT_GT(forwardFlops(g, 0, half), 0);
}

// CNN forward: a 3x3 convolution is 2 x (output elements) x (in channels x 9);
// each block halves the image; the head is 2 B x classes x features.
TEST(Flops, CnnForwardIsItsConvolutionsAndHead) {
  torch::manual_seed(0);
  models::CnnOptions o;
  o.channels = {4, 8};
  models::Cnn cnn(o);
  const double B = 3;
  auto images = torch::zeros({3, 1, 28, 28});
  const auto g = capture(*cnn, [&](const std::vector<torch::Tensor>& in) { return cnn->forward(in[0]); },
                         {{"images", images}});
  const double expected = 2 * B * 4 * 28 * 28 * (1 * 9) + 2 * B * 8 * 14 * 14 * (4 * 9) + 2 * B * 10 * (8 * 7 * 7);
  EXPECT_DOUBLE_EQ(forwardFlops(g, 0, g.numNodes()), expected) << g.toString();
}

// (A rate, not a bound on it: no timing assertion.)
TEST(Flops, MatmulRateIsMeasured) {
  const double rate = measureMatmulRate(c10::Device(c10::kCPU), c10::kFloat, 0.05);
  EXPECT_TRUE(std::isfinite(rate));
  EXPECT_GT(rate, 0);
}

}  // namespace
}  // namespace sluice
