#include "launcher/ModelSetup.h"

#include "core/Error.h"
#include "models/Gpt.h"
#include "models/Mlp.h"

namespace sluice {

namespace {

torch::Tensor crossEntropy(const torch::Tensor& logits, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

}  // namespace

ModelSetup makeModelSetup(const Config& c) {
  ModelSetup s;
  torch::manual_seed(static_cast<uint64_t>(c.job.seed));
  if (c.model.name == "gpt") {
    models::GptOptions o;
    o.vocabSize = c.model.vocabSize;
    o.blockSize = c.model.blockSize;
    o.layers = c.model.layers;
    o.heads = c.model.heads;
    o.embd = c.model.embd;
    o.dropout = c.model.dropout;
    auto gpt = models::Gpt(o);
    s.module = gpt.ptr();
    s.forward = [gpt](const std::vector<torch::Tensor>& in) mutable { return gpt->forward(in.at(0)); };
    s.tokensPerSample = o.blockSize;
    if (c.data.name == "text") {
      s.dataset = std::make_unique<data::TextDataset>(c.data.path, o.blockSize, c.job.seed);
    } else {
      s.dataset = std::make_unique<data::SyntheticTokens>(o.vocabSize, o.blockSize, c.job.seed);
    }
  } else {
    models::MlpOptions o;
    o.inputDim = c.model.inputDim;
    o.hidden = c.model.hidden;
    o.layers = c.model.mlpLayers;
    o.classes = c.model.classes;
    auto mlp = models::Mlp(o);
    s.module = mlp.ptr();
    s.forward = [mlp](const std::vector<torch::Tensor>& in) mutable { return mlp->forward(in.at(0)); };
    s.dataset = std::make_unique<data::SyntheticClassification>(o.inputDim, o.classes, c.job.seed);
  }
  s.loss = crossEntropy;
  return s;
}

OpGraph ModelSetup::capture(int64_t microBatchSize) const {
  auto example = dataset->batch(0, microBatchSize).input;
  return sluice::capture(*module, forward, {{"input", example}});
}

std::vector<torch::Tensor> ModelSetup::tensorsByName(const std::vector<std::string>& names) const {
  return sluice::tensorsByName(*module, names);
}

}  // namespace sluice
