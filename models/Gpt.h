// A GPT language model (GPT-2 layout): token + position embeddings, N
// pre-LayerNorm blocks of causal self-attention and a GELU MLP, each with a
// residual, a final LayerNorm and an LM head (tieEmbeddings: wte's weight,
// as GPT-2's; one parameter read by the first and the last node).
//
// Module paths follow GPT-2: wte, wpe, h.<i>.{ln_1,attn.c_attn,attn.c_proj,
// ln_2,mlp.c_fc,mlp.c_proj}, ln_f, lm_head. With dropout > 0, GPT-2's
// dropout: after the embeddings, on the attention weights (attnDropout, by
// default the same) and after each residual branch (random, so a pipeline
// reproduces a run only with the same seed and the same random stream per
// rank); 0 adds no dropout nodes.
//
//   sluice::models::GptOptions o; o.layers = 2;
//   sluice::models::Gpt gpt(o);
//   auto logits = gpt->forward(tokens);   // tokens: int64 [B, T], T <= o.blockSize
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

namespace sluice::models {

struct GptOptions {
  int64_t vocabSize = 256;
  int64_t blockSize = 64;  // maximum sequence length
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t embd = 64;
  double dropout = 0.0;
  double attnDropout = -1;     // on the attention weights; < 0: dropout
  bool tieEmbeddings = false;  // lm_head reads wte.weight (no lm_head module)
  double attentionDropout() const { return attnDropout < 0 ? dropout : attnDropout; }
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptOptions& o);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t heads_, embd_;
  double dropout_, attnDropout_;
  torch::nn::Linear cAttn_{nullptr}, cProj_{nullptr};
  torch::Tensor mask_;
};
TORCH_MODULE(CausalSelfAttention);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptOptions& o);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::Linear fc_{nullptr}, proj_{nullptr};
  double dropout_;
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptOptions& o);
  // tokens: int64 [B, T] -> logits float [B, T, vocabSize]
  torch::Tensor forward(const torch::Tensor& tokens);
  const GptOptions& options() const { return options_; }

 private:
  GptOptions options_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm lnF_{nullptr};
  torch::nn::Linear lmHead_{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace sluice::models
