// Note [attention fusion]: capture rewrites causal attention written op by op
// into one scaled_dot_product_attention node where every condition holds,
// and the rewritten graph computes what the eager module computes (forward
// and parameter gradients), compared against the module run by LibTorch.
#include <gtest/gtest.h>

#include <map>

#include "core/Capture.h"
#include "core/GraphSplit.h"
#include "core/StageModule.h"
#include "models/Llama.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {

constexpr const char* kFused = "aten::scaled_dot_product_attention";

int count(const OpGraph& g, const std::string& op) {
  int n = 0;
  for (auto& node : g.nodes()) n += node.op == op;
  return n;
}

OpGraph captureLm(torch::nn::Module& m, const std::function<torch::Tensor(const torch::Tensor&)>& fwd,
                  const torch::Tensor& tokens, const CaptureOptions& options = {}) {
  return capture(m, [&](const std::vector<torch::Tensor>& in) { return fwd(in[0]); }, {{"tokens", tokens}}, options);
}

// The graph run as one stage on the module's own parameters.
torch::Tensor runGraph(const OpGraph& g, torch::nn::Module& m, const torch::Tensor& tokens) {
  auto stages = splitGraph(g, {});
  StageModule stage(stages.at(0).graph, "whole");
  std::vector<torch::Tensor> in{tokens};
  for (auto& p : tensorsByName(m, stages.at(0).paramInputs)) in.push_back(p);
  return stage.forward(in).at(0);
}

std::map<std::string, torch::Tensor> gradientsOf(torch::nn::Module& m, const torch::Tensor& out) {
  for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
  out.square().mean().backward();
  std::map<std::string, torch::Tensor> grads;
  for (auto& p : m.named_parameters()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

// Forward and every parameter's gradient: the captured graph against the module.
void expectSameAsEager(const OpGraph& g, torch::nn::Module& m,
                       const std::function<torch::Tensor(const torch::Tensor&)>& fwd, const torch::Tensor& tokens) {
  const auto eager = fwd(tokens);
  const auto graph = runGraph(g, m, tokens);
  EXPECT_TRUE(torch::allclose(graph, eager, 1e-5, 1e-6)) << (graph - eager).abs().max();
  const auto eagerGrads = gradientsOf(m, eager), graphGrads = gradientsOf(m, graph);
  for (auto& [name, grad] : eagerGrads)
    EXPECT_TRUE(torch::allclose(graphGrads.at(name), grad, 1e-4, 1e-6))
        << name << ": " << (graphGrads.at(name) - grad).abs().max();
}

TEST(AttentionFusion, GptAttentionBecomesOneNodeWithTheSameResults) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  auto fwd = [&](const torch::Tensor& t) { return gpt->forward(t); };
  const auto tokens = torch::randint(0, 64, {2, 16}, torch::kLong);
  const auto g = captureLm(*gpt, fwd, tokens);
  EXPECT_EQ(g.fusedAttentions(), 2);
  EXPECT_EQ(count(g, kFused), 2) << g.toString();
  EXPECT_EQ(count(g, "aten::softmax"), 0);
  EXPECT_EQ(count(g, "aten::masked_fill"), 0);
  EXPECT_EQ(count(g, "aten::matmul"), 9);  // 4 linear layers per block and the head
  expectSameAsEager(g, *gpt, fwd, tokens);
}

TEST(AttentionFusion, OffKeepsTheGraphAsWritten) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  const auto g = captureLm(*gpt, [&](const torch::Tensor& t) { return gpt->forward(t); },
                           torch::zeros({2, 16}, torch::kLong), CaptureOptions{/*fuseAttention=*/false});
  EXPECT_EQ(g.fusedAttentions(), 0);
  EXPECT_EQ(count(g, kFused), 0);
  EXPECT_EQ(count(g, "aten::softmax"), 2);
}

// A mask that is not causal (here: block 0 attends everywhere) is no
// is_causal: that block stays as written, and the graph still equals eager.
TEST(AttentionFusion, OnlyACausalMaskIsFused) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  {
    torch::NoGradGuard noGrad;
    for (auto& b : gpt->named_buffers())
      if (b.key() == "h.0.attn.mask") b.value().fill_(1);
  }
  auto fwd = [&](const torch::Tensor& t) { return gpt->forward(t); };
  const auto tokens = torch::randint(0, 64, {2, 16}, torch::kLong);
  const auto g = captureLm(*gpt, fwd, tokens);
  EXPECT_EQ(g.fusedAttentions(), 1);
  EXPECT_EQ(count(g, "aten::softmax"), 1);
  expectSameAsEager(g, *gpt, fwd, tokens);
}

// A dropout on the attention weights keeps the weights (its own random
// stream), in eval mode too (the evaluation graph must follow the training
// graph); without it (attn_dropout 0) the block fuses, the other dropouts
// staying where they are.
TEST(AttentionFusion, DrawingAttentionDropoutStaysAsWritten) {
  auto opts = test::tinyGpt(2);
  opts.dropout = 0.1;
  models::Gpt drawing(opts);
  const auto tokens = torch::zeros({2, 16}, torch::kLong);
  auto fwdOf = [](models::Gpt& m) { return [&m](const torch::Tensor& t) { return m->forward(t); }; };
  EXPECT_EQ(captureLm(*drawing, fwdOf(drawing), tokens).fusedAttentions(), 0);
  drawing->eval();
  EXPECT_EQ(captureLm(*drawing, fwdOf(drawing), tokens).fusedAttentions(), 0);
  opts.attnDropout = 0;
  models::Gpt residualOnly(opts);
  const auto g = captureLm(*residualOnly, fwdOf(residualOnly), tokens);
  EXPECT_EQ(g.fusedAttentions(), 2);
  EXPECT_GT(count(g, "aten::dropout"), 0);
}

// bfloat16 attention stays as written (CPU's fused backward is slower there).
TEST(AttentionFusion, Bfloat16StaysAsWritten) {
  models::Gpt gpt(test::tinyGpt(2));
  gpt->to(torch::kBFloat16);
  const auto g = captureLm(*gpt, [&](const torch::Tensor& t) { return gpt->forward(t); },
                           torch::zeros({2, 16}, torch::kLong));
  EXPECT_EQ(g.fusedAttentions(), 0);
  EXPECT_EQ(count(g, "aten::softmax"), 2);
}

// Llama: one mask sliced once and read by every block, grouped-query
// attention (keys and values expanded to the query heads), rotary q and k.
TEST(AttentionFusion, LlamaGroupedQueryAttention) {
  torch::manual_seed(0);
  models::LlamaOptions o;
  o.vocabSize = 64;
  o.blockSize = 16;
  o.layers = 2;
  o.heads = 4;
  o.kvHeads = 2;
  o.embd = 32;
  models::Llama llama(o);
  auto fwd = [&](const torch::Tensor& t) { return llama->forward(t); };
  const auto tokens = torch::randint(0, 64, {2, 16}, torch::kLong);
  const auto g = captureLm(*llama, fwd, tokens);
  EXPECT_EQ(g.fusedAttentions(), 2);
  expectSameAsEager(g, *llama, fwd, tokens);
}

// One causal attention over an embedding, with what the conditions look at
// made to vary: the fill value, and a second reader of the weights.
struct ManualAttentionImpl : torch::nn::Module {
  torch::nn::Embedding emb{nullptr};
  torch::Tensor mask;
  double fill;
  bool returnWeights;
  ManualAttentionImpl(double fill, bool returnWeights) : fill(fill), returnWeights(returnWeights) {
    emb = register_module("emb", torch::nn::Embedding(64, 16));
    mask = register_buffer("mask", torch::tril(torch::ones({16, 16})).view({1, 1, 16, 16}));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = emb->forward(tokens).view({tokens.size(0), tokens.size(1), 2, 8}).transpose(1, 2);
    auto att = torch::matmul(x, x.transpose(-2, -1)) * 0.25;
    att = torch::softmax(att.masked_fill(mask == 0, fill), -1);
    auto y = torch::matmul(att, x).sum();
    return returnWeights ? y + att.sum() : y;
  }
};
TORCH_MODULE(ManualAttention);

int fusedIn(ManualAttention& m) {
  return captureLm(*m, [&](const torch::Tensor& t) { return m->forward(t); }, torch::zeros({2, 16}, torch::kLong))
      .fusedAttentions();
}

TEST(AttentionFusion, OnlyMinusInfinityFillAndSingleReadWeightsFuse) {
  const double inf = std::numeric_limits<double>::infinity();
  ManualAttention plain(-inf, false), largeNegative(-1e9, false), weightsReturned(-inf, true);
  EXPECT_EQ(fusedIn(plain), 1);
  EXPECT_EQ(fusedIn(largeNegative), 0) << "-1e9 is not exactly the causal mask";
  EXPECT_EQ(fusedIn(weightsReturned), 0) << "the weights are read by the output too";
}

}  // namespace
}  // namespace sluice
