// A Llama-style language model: token embeddings, N pre-norm blocks of
// RMSNorm, causal self-attention with rotary position embeddings and
// grouped-query attention (kvHeads key/value heads shared by heads / kvHeads
// query heads each), RMSNorm and a SwiGLU MLP (w2(silu(w1 x) * w3 x)), each
// with a residual; a final RMSNorm and the output projection. No biases.
//
// Module paths follow Meta's reference: tok_embeddings, layers.<i>.
// {attention_norm, attention.{wq,wk,wv,wo}, ffn_norm, feed_forward.{w1,w2,w3}},
// norm, output (absent when tied). tieEmbeddings: the output projection
// reads tok_embeddings.weight (one parameter, read by the first and the last
// node: on a pipeline the first and last stage each hold it and their
// gradients are summed, Note [tied parameters] in train/RankTopology.h).
// Buffers: the causal mask and the rotary cos/sin tables (block_size rows).
// With dropout > 0: after the embeddings, on the attention weights and after
// each residual branch, as the GPT model; 0 adds no dropout nodes. Written
// with plain aten ops (no fused attention or rms_norm kernel) so that
// capture, profiling and the split backward see every op.
//
//   sluice::models::LlamaOptions o; o.layers = 2; o.kvHeads = 2;
//   sluice::models::Llama llama(o);
//   auto logits = llama->forward(tokens);   // tokens: int64 [B, T], T <= o.blockSize
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

namespace sluice::models {

struct LlamaOptions {
  int64_t vocabSize = 512;
  int64_t blockSize = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kvHeads = 4;   // divides heads; heads = kvHeads is plain multi-head attention
  int64_t embd = 64;
  int64_t hidden = 0;    // SwiGLU width; 0: Llama's 2/3 x 4 x embd, rounded up to a multiple of 32
  double dropout = 0.0;
  double attnDropout = -1;  // on the attention weights; < 0: dropout
  bool tieEmbeddings = true;
  double ropeTheta = 10000.0;
  double normEps = 1e-5;
  int64_t mlpHidden() const;
  double attentionDropout() const { return attnDropout < 0 ? dropout : attnDropout; }
};

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::Tensor weight_;
  double eps_;
};
TORCH_MODULE(RmsNorm);

class LlamaBlockImpl : public torch::nn::Module {
 public:
  explicit LlamaBlockImpl(const LlamaOptions& o);
  // cos, sin: [T, headDim]; mask: [T, T] (1 = may attend)
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);

 private:
  LlamaOptions o_;
  RmsNorm attentionNorm_{nullptr}, ffnNorm_{nullptr};
  torch::nn::Linear wq_{nullptr}, wk_{nullptr}, wv_{nullptr}, wo_{nullptr};
  torch::nn::Linear w1_{nullptr}, w2_{nullptr}, w3_{nullptr};
};
TORCH_MODULE(LlamaBlock);

class LlamaImpl : public torch::nn::Module {
 public:
  explicit LlamaImpl(const LlamaOptions& o);
  // tokens: int64 [B, T] -> logits float [B, T, vocabSize]
  torch::Tensor forward(const torch::Tensor& tokens);
  const LlamaOptions& options() const { return options_; }

 private:
  LlamaOptions options_;
  torch::nn::Embedding tokEmbeddings_{nullptr};
  torch::nn::ModuleList layers_;
  RmsNorm norm_{nullptr};
  torch::nn::Linear output_{nullptr};  // null when tied
  torch::Tensor mask_, cos_, sin_;
};
TORCH_MODULE(Llama);

}  // namespace sluice::models
