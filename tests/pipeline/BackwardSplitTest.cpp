// BackwardSplit: input gradients first, weight gradients later, equal to one
// backward; nothing reaches a parameter's .grad before runWeight.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/variable.h>

#include "pipeline/BackwardSplit.h"

namespace sluice::pipeline {
namespace {

struct Toy {
  torch::Tensor x, w1, w2, b, emb;
  std::vector<torch::Tensor> params() const { return {w1, w2, b, emb}; }
};

Toy makeToy() {
  torch::manual_seed(7);
  Toy t;
  t.x = torch::randn({4, 6}).requires_grad_(true);
  t.w1 = torch::randn({5, 6}).requires_grad_(true);
  t.w2 = torch::randn({5, 5}).requires_grad_(true);
  t.b = torch::randn({5}).requires_grad_(true);
  t.emb = torch::randn({10, 5}).requires_grad_(true);
  return t;
}

// w1 is read twice (a tied weight), the bias by an add, emb only through an
// index (a node that feeds weights alone), and x through everything.
torch::Tensor forward(const Toy& t) {
  auto h = torch::linear(t.x, t.w1, t.b);
  auto y = torch::tanh(h).matmul(t.w2) + torch::linear(t.x, t.w1);
  auto ids = torch::tensor({1, 3, 3, 7});
  return (y * t.emb.index_select(0, ids)).pow(2).sum();
}

TEST(BackwardSplit, InputThenWeightEqualsOneBackward) {
  auto ref = makeToy();
  forward(ref).backward();

  auto t = makeToy();
  auto loss = forward(t);
  BackwardSplit split;
  auto grads = split.runInput({torch::autograd::impl::gradient_edge(loss)}, {torch::ones_like(loss)}, {t.x});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(torch::allclose(grads[0], ref.x.grad(), 1e-5, 1e-6));
  EXPECT_FALSE(t.x.grad().defined()) << "input gradients are returned, not accumulated";
  for (auto& p : t.params()) EXPECT_FALSE(p.grad().defined()) << "a weight gradient ran before runWeight";
  split.runWeight();
  auto want = ref.params(), got = t.params();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(got[i].grad().defined()) << "parameter " << i;
    EXPECT_TRUE(torch::allclose(got[i].grad(), want[i].grad(), 1e-5, 1e-6)) << "parameter " << i;
  }
}

// Without an input that needs a gradient (a first stage), everything is weight work.
TEST(BackwardSplit, FirstStageDefersEverything) {
  auto ref = makeToy();
  ref.x.requires_grad_(false);
  forward(ref).backward();
  auto t = makeToy();
  t.x.requires_grad_(false);
  auto loss = forward(t);
  BackwardSplit split;
  auto grads = split.runInput({torch::autograd::impl::gradient_edge(loss)}, {torch::ones_like(loss)}, {t.x});
  EXPECT_FALSE(grads[0].defined());
  for (auto& p : t.params()) EXPECT_FALSE(p.grad().defined());
  split.runWeight();
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(torch::allclose(t.params()[i].grad(), ref.params()[i].grad()));
}

}  // namespace
}  // namespace sluice::pipeline
