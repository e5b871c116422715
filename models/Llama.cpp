#include "models/Llama.h"

#include <cmath>
#include <limits>

#include "models/Dropout.h"

namespace sluice::models {

namespace nn = torch::nn;

namespace {

// The rotation of each pair (x_i, x_{i + d/2}) by RoPE's angle: [-x2, x1].
torch::Tensor rotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

}  // namespace

int64_t LlamaOptions::mlpHidden() const {
  if (hidden > 0) return hidden;
  const int64_t h = (2 * 4 * embd + 2) / 3;
  return (h + 31) / 32 * 32;
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight_;
}

LlamaBlockImpl::LlamaBlockImpl(const LlamaOptions& o) : o_(o) {
  const int64_t hd = o.embd / o.heads;
  auto linear = [](int64_t in, int64_t out) { return nn::Linear(nn::LinearOptions(in, out).bias(false)); };
  attentionNorm_ = register_module("attention_norm", RmsNorm(o.embd, o.normEps));
  auto attention = register_module("attention", std::make_shared<nn::Module>());
  wq_ = attention->register_module("wq", linear(o.embd, o.heads * hd));
  wk_ = attention->register_module("wk", linear(o.embd, o.kvHeads * hd));
  wv_ = attention->register_module("wv", linear(o.embd, o.kvHeads * hd));
  wo_ = attention->register_module("wo", linear(o.heads * hd, o.embd));
  ffnNorm_ = register_module("ffn_norm", RmsNorm(o.embd, o.normEps));
  auto ff = register_module("feed_forward", std::make_shared<nn::Module>());
  w1_ = ff->register_module("w1", linear(o.embd, o.mlpHidden()));
  w2_ = ff->register_module("w2", linear(o.mlpHidden(), o.embd));
  w3_ = ff->register_module("w3", linear(o.embd, o.mlpHidden()));
}

torch::Tensor LlamaBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                      const torch::Tensor& mask) {
  const int64_t B = x.size(0), T = x.size(1), H = o_.heads, K = o_.kvHeads, hd = o_.embd / o_.heads;
  auto h = attentionNorm_->forward(x);
  auto q = wq_->forward(h).view({B, T, H, hd}).transpose(1, 2);
  auto k = wk_->forward(h).view({B, T, K, hd}).transpose(1, 2);
  auto v = wv_->forward(h).view({B, T, K, hd}).transpose(1, 2);
  q = q * cos + rotateHalf(q) * sin;
  k = k * cos + rotateHalf(k) * sin;
  if (K != H) {  // grouped-query attention: each key/value head serves H / K query heads
    k = k.unsqueeze(2).expand({B, K, H / K, T, hd}).reshape({B, H, T, hd});
    v = v.unsqueeze(2).expand({B, K, H / K, T, hd}).reshape({B, H, T, hd});
  }
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  // -inf, not a large negative number: float16 (fp16 autocast) ends at 65504. softmax gives
  // those entries exactly 0 either way, so float32 results do not change.
  att = att.masked_fill(mask == 0, -std::numeric_limits<double>::infinity());
  att = maybeDropout(torch::softmax(att, -1), o_.attentionDropout(), is_training());
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, H * hd});
  auto r = x + maybeDropout(wo_->forward(y), o_.dropout, is_training());
  auto f = ffnNorm_->forward(r);
  auto mlp = w2_->forward(torch::silu(w1_->forward(f)) * w3_->forward(f));
  return r + maybeDropout(mlp, o_.dropout, is_training());
}

LlamaImpl::LlamaImpl(const LlamaOptions& o) : options_(o) {
  TORCH_CHECK(o.embd % o.heads == 0 && (o.embd / o.heads) % 2 == 0, "model.embd / model.heads must be even");
  TORCH_CHECK(o.kvHeads >= 1 && o.heads % o.kvHeads == 0, "model.kv_heads must divide model.heads");
  tokEmbeddings_ = register_module("tok_embeddings", nn::Embedding(o.vocabSize, o.embd));
  layers_ = register_module("layers", nn::ModuleList());
  for (int64_t i = 0; i < o.layers; ++i) layers_->push_back(LlamaBlock(o));
  norm_ = register_module("norm", RmsNorm(o.embd, o.normEps));
  if (!o.tieEmbeddings) {
    output_ = register_module("output", nn::Linear(nn::LinearOptions(o.embd, o.vocabSize).bias(false)));
  }
  // Rotary tables for positions 0..block_size-1: angle p * theta^(-2i / hd),
  // each frequency twice (the halves rotateHalf pairs).
  const int64_t hd = o.embd / o.heads;
  auto inv = torch::pow(o.ropeTheta, -torch::arange(0, hd, 2, torch::kDouble) / static_cast<double>(hd));
  auto angles = torch::outer(torch::arange(o.blockSize, torch::kDouble), inv);
  angles = torch::cat({angles, angles}, -1);
  cos_ = register_buffer("rope_cos", angles.cos().to(torch::kFloat));
  sin_ = register_buffer("rope_sin", angles.sin().to(torch::kFloat));
  mask_ = register_buffer("mask", torch::tril(torch::ones({o.blockSize, o.blockSize})));
  // N(0, 0.02) weights; the residual projections (wo, w2) scaled by 1/sqrt(2 * layers); norms ones.
  torch::NoGradGuard noGrad;
  for (auto& p : named_parameters()) {
    const auto& name = p.key();
    if (name.find("norm") != std::string::npos) continue;
    const bool residual = name.find(".wo.") != std::string::npos || name.find(".w2.") != std::string::npos;
    p.value().normal_(0.0, residual ? 0.02 / std::sqrt(2.0 * o.layers) : 0.02);
  }
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= options_.blockSize, "sequence length ", T, " exceeds model.block_size ", options_.blockSize);
  auto cos = cos_.slice(0, 0, T), sin = sin_.slice(0, 0, T);
  auto mask = mask_.slice(0, 0, T).slice(1, 0, T);
  auto x = maybeDropout(tokEmbeddings_->forward(tokens), options_.dropout, is_training());
  for (auto& m : *layers_) x = m->as<LlamaBlock>()->forward(x, cos, sin, mask);
  x = norm_->forward(x);
  return options_.tieEmbeddings ? torch::linear(x, tokEmbeddings_->weight) : output_->forward(x);
}

}  // namespace sluice::models
