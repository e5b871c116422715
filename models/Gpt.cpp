#include "models/Gpt.h"

#include <cmath>
#include <limits>

#include "models/Dropout.h"

namespace sluice::models {

namespace nn = torch::nn;

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptOptions& o)
    : heads_(o.heads), embd_(o.embd), dropout_(o.dropout), attnDropout_(o.attentionDropout()) {
  TORCH_CHECK(o.embd % o.heads == 0, "model.embd (", o.embd, ") must be divisible by model.heads (", o.heads, ")");
  cAttn_ = register_module("c_attn", nn::Linear(o.embd, 3 * o.embd));
  cProj_ = register_module("c_proj", nn::Linear(o.embd, o.embd));
  // A buffer (not a parameter): lifted to a graph input like the weights.
  mask_ = register_buffer("mask", torch::tril(torch::ones({o.blockSize, o.blockSize})).view({1, 1, o.blockSize, o.blockSize}));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads_;
  auto qkv = cAttn_->forward(x).split(C, 2);
  auto q = qkv[0].view({B, T, heads_, hd}).transpose(1, 2);
  auto k = qkv[1].view({B, T, heads_, hd}).transpose(1, 2);
  auto v = qkv[2].view({B, T, heads_, hd}).transpose(1, 2);
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  auto causal = mask_.slice(2, 0, T).slice(3, 0, T);
  // -inf, not a large negative number: float16 (fp16 autocast) ends at 65504. softmax gives
  // those entries exactly 0 either way, so float32 results do not change.
  att = att.masked_fill(causal == 0, -std::numeric_limits<double>::infinity());
  att = maybeDropout(torch::softmax(att, -1), attnDropout_, is_training());
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  return maybeDropout(cProj_->forward(y), dropout_, is_training());
}

BlockImpl::BlockImpl(const GptOptions& o) : dropout_(o.dropout) {
  ln1_ = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({o.embd})));
  attn_ = register_module("attn", CausalSelfAttention(o));
  ln2_ = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({o.embd})));
  auto mlp = register_module("mlp", std::make_shared<nn::Module>());
  fc_ = mlp->register_module("c_fc", nn::Linear(o.embd, 4 * o.embd));
  proj_ = mlp->register_module("c_proj", nn::Linear(4 * o.embd, o.embd));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto h = x + attn_->forward(ln1_->forward(x));
  return h + maybeDropout(proj_->forward(torch::gelu(fc_->forward(ln2_->forward(h)))), dropout_, is_training());
}

GptImpl::GptImpl(const GptOptions& o) : options_(o) {
  wte_ = register_module("wte", nn::Embedding(o.vocabSize, o.embd));
  wpe_ = register_module("wpe", nn::Embedding(o.blockSize, o.embd));
  blocks_ = register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < o.layers; ++i) blocks_->push_back(Block(o));
  lnF_ = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({o.embd})));
  if (!o.tieEmbeddings) {
    lmHead_ = register_module("lm_head", nn::Linear(nn::LinearOptions(o.embd, o.vocabSize).bias(false)));
  }
  // GPT-2 initialisation: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2 * layers).
  torch::NoGradGuard noGrad;
  for (auto& p : named_parameters()) {
    const auto& name = p.key();
    auto& t = p.value();
    if (name.find("ln_") != std::string::npos) continue;  // LayerNorm keeps ones/zeros
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      t.zero_();
    } else if (name.find("c_proj.weight") != std::string::npos) {
      t.normal_(0.0, 0.02 / std::sqrt(2.0 * o.layers));
    } else {
      t.normal_(0.0, 0.02);
    }
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= options_.blockSize, "sequence length ", T, " exceeds model.block_size ", options_.blockSize);
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  auto x = maybeDropout(wte_->forward(tokens) + wpe_->forward(pos), options_.dropout, is_training());
  for (auto& m : *blocks_) x = m->as<Block>()->forward(x);
  x = lnF_->forward(x);
  return options_.tieEmbeddings ? torch::linear(x, wte_->weight) : lmHead_->forward(x);
}

}  // namespace sluice::models
