// Splitting an OpGraph: values live across a cut (residuals) are carried, and
// running the stages one after another equals running the whole graph.
#include <gtest/gtest.h>

#include "core/Capture.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "core/StageModule.h"
#include "models/Cnn.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {

// Index of the n-th node (0-based) with this op.
int nthNode(const OpGraph& g, const std::string& op, int n) {
  for (auto& node : g.nodes()) {
    if (node.op == op && n-- == 0) return node.index;
  }
  return -1;
}

// Runs the stages in order on one process and returns the final output.
torch::Tensor runChained(models::Gpt& gpt, const std::vector<StageGraph>& stages, const torch::Tensor& tokens) {
  std::vector<torch::Tensor> carry{tokens};
  for (auto& st : stages) {
    StageModule m(st.graph, "stage" + std::to_string(st.index));
    std::vector<torch::Tensor> in = carry;
    for (auto& p : tensorsByName(*gpt, st.paramInputs)) in.push_back(p);
    carry = m.forward(in);
    EXPECT_EQ(carry.size(), st.outputs.size());
  }
  return carry.at(0);
}

TEST(Split, CutInsideBlockCarriesResidual) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  auto g = test::captureGpt(gpt, 2, 8, CaptureOptions{/*fuseAttention=*/false});
  // Cut right after block 0's attention softmax: the residual stream (the
  // embedding sum, produced by the first aten::add) is needed after the cut
  // by the block's residual add, so it must cross together with the attention
  // probabilities and the value tensor.
  int residual = nthNode(g, "aten::add", 0);
  int cut = nthNode(g, "aten::softmax", 0) + 1;
  ASSERT_GE(residual, 0);
  ASSERT_TRUE(g.isValidCut(cut));
  auto live = g.liveAcross(cut);
  std::vector<std::string> names;
  for (auto& v : live) names.push_back(v.name);
  const std::string residualName = g.nodes()[residual].outputs[0].name;
  EXPECT_NE(std::find(names.begin(), names.end(), residualName), names.end()) << "residual not carried";
  EXPECT_GE(live.size(), 3u);

  auto stages = splitGraph(g, {cut});
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[1].boundaryInputs.size(), live.size());
  EXPECT_EQ(stages[0].outputs.size(), live.size());
  auto tokens = torch::randint(0, 64, {2, 8}, torch::kLong);
  EXPECT_TRUE(torch::allclose(runChained(gpt, stages, tokens), gpt->forward(tokens), 1e-5, 1e-6));
}

TEST(Split, FourStagesEqualWholeGraphIncludingGradients) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  auto g = test::captureGpt(gpt, 2, 8);
  auto valid = g.validCuts();
  ASSERT_GE(valid.size(), 3u);
  std::vector<int> cuts{valid[valid.size() / 4], valid[valid.size() / 2], valid[3 * valid.size() / 4]};
  auto stages = splitGraph(g, cuts);
  ASSERT_EQ(stages.size(), 4u);
  // Each parameter appears in exactly the stages whose nodes read it.
  size_t total = 0;
  for (auto& st : stages) total += st.paramInputs.size();
  EXPECT_GE(total, gpt->parameters().size());

  auto tokens = torch::randint(0, 64, {2, 8}, torch::kLong);
  auto ref = gpt->forward(tokens).square().sum();
  ref.backward();
  std::vector<torch::Tensor> refGrads;
  for (auto& p : gpt->parameters()) {
    refGrads.push_back(p.grad().clone());
    p.mutable_grad().zero_();
  }
  auto out = runChained(gpt, stages, tokens).square().sum();
  EXPECT_NEAR(out.item<double>(), ref.item<double>(), 1e-4 * std::abs(ref.item<double>()));
  out.backward();
  auto params = gpt->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i].grad(), refGrads[i], 1e-4, 1e-6)) << "param " << i;
  }
}

// Note [requires grad by dataflow]: every floating value computed from the
// parameters requires grad, whatever the tracer's types say, so every cut
// sends gradients back. A CNN in training mode is the case where the traced
// type of a convolution feeding BatchNorm lacks the flag (a 2-stage run cut
// after the second convolution then trained stage 0 with no gradient).
TEST(Split, EveryFloatValueMadeFromParametersRequiresGrad) {
  torch::manual_seed(0);
  models::CnnOptions o;
  o.channels = {4, 8};
  models::Cnn cnn(o);
  cnn->train();
  auto image = torch::zeros({2, 1, 28, 28});
  auto g = capture(*cnn, [&](const std::vector<torch::Tensor>& in) { return cnn->forward(in[0]); }, {{"image", image}});
  int checked = 0;
  for (int c : g.validCuts()) {
    for (auto& v : g.liveAcross(c)) {
      if (!v.isTensor || !c10::isFloatingType(v.dtype) || v.name == g.inputs().at(0).value.name) continue;
      EXPECT_TRUE(v.requiresGrad) << "value " << v.name << " live across cut " << c << "\n" << g.toString();
      ++checked;
    }
  }
  EXPECT_GE(checked, 8);
}

TEST(Split, CutThatWouldSendAListIsRejected) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(1));
  auto g = test::captureGpt(gpt, 2, 8);
  int cut = nthNode(g, "aten::split", 0) + 1;  // between split and its ListUnpack
  EXPECT_FALSE(g.isValidCut(cut));
  try {
    splitGraph(g, {cut});
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("non-tensor"), std::string::npos) << e.what();
  }
  EXPECT_THROW(splitGraph(g, {0}), GraphError);
  EXPECT_THROW(splitGraph(g, {g.numNodes()}), GraphError);
}

// The traced linear is matmul then add_ into the product: a cut between them
// would hand the next stage the product as a leaf that requires grad, which
// add_ may not write into. Such cuts (also across views of the written value)
// are not valid, and say why; the cut before the matmul is.
TEST(Split, CutBeforeAnInPlaceWriteIntoTheBoundaryIsRejected) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(1));
  auto g = test::captureGpt(gpt, 2, 8);
  int write = -1;
  for (auto& node : g.nodes()) {
    if (node.op == "aten::add_" && node.index > 0 && g.nodes()[node.index - 1].op == "aten::matmul") {
      write = node.index;
      break;
    }
  }
  ASSERT_GT(write, 0) << "no matmul + add_ (traced linear) in the graph";
  EXPECT_FALSE(g.isValidCut(write));
  EXPECT_NE(g.whyInvalidCut(write).find("writes in place"), std::string::npos) << g.whyInvalidCut(write);
  try {
    splitGraph(g, {write});
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("aten::add_"), std::string::npos) << e.what();
  }
  for (int c : g.validCuts()) EXPECT_NE(c, write);
  // Every valid cut trains: no stage writes into what it received (forward + backward of 2 stages).
  for (int c : g.validCuts()) {
    auto stages = splitGraph(g, {c});
    std::vector<torch::Tensor> carry{torch::randint(0, 64, {2, 8})};
    for (auto& st : stages) {
      StageModule m(st.graph, "stage" + std::to_string(st.index));
      std::vector<torch::Tensor> in;
      for (auto& t : carry) in.push_back(t.is_floating_point() ? t.detach().requires_grad_(true) : t);
      for (auto& p : tensorsByName(*gpt, st.paramInputs)) in.push_back(p);
      ASSERT_NO_THROW(carry = m.forward(in)) << "cut " << c << ", stage " << st.index;
    }
  }
}

}  // namespace
}  // namespace sluice
