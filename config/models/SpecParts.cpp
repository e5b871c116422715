// What the built-in models' spec files share (config/models/Specs.h).
#include <torch/nn/functional/loss.h>

#include <filesystem>

#include "config/models/Specs.h"
#include "core/Error.h"
#include "data/TokenFile.h"

namespace sluice::modelspecs {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError("config error: " + message);
}

at::Tensor crossEntropy(const at::Tensor& logits, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

std::unique_ptr<data::FashionMnist> fashionMnistTrain(const Config& c) {
  auto d = std::make_unique<data::FashionMnist>(c.data.path, "train", c.job.seed);
  SLUICE_CHECK(d->samples() >= c.training.globalBatchSize, DataError,
               "fashion_mnist: " << data::FashionMnist::imagesFile("train") << " in " << c.data.path << " holds "
                                 << d->samples() << " images, fewer than training.global_batch_size ("
                                 << c.training.globalBatchSize << "): lower the batch size or use the full data set");
  return d;
}

void validateLanguageModel(Config& c) {
  auto& m = c.model;
  for (auto [key, v] : {std::pair<const char*, int64_t>{"model.vocab_size", m.vocabSize},
                        {"model.block_size", m.blockSize}, {"model.layers", m.layers},
                        {"model.heads", m.heads}, {"model.embd", m.embd}}) {
    require(v >= 1, std::string(key) + " must be >= 1, got " + std::to_string(v));
  }
  require(m.embd % m.heads == 0, "model.embd (" + std::to_string(m.embd) + ") must be divisible by model.heads (" +
                                     std::to_string(m.heads) + "): " + std::to_string(m.embd) + " % " +
                                     std::to_string(m.heads) + " = " + std::to_string(m.embd % m.heads));
  require(m.dropout >= 0 && m.dropout < 1, "model.dropout must be in [0, 1), got " + std::to_string(m.dropout));
  require(m.attnDropout >= 0 && m.attnDropout < 1,
          "model.attn_dropout must be in [0, 1), got " + std::to_string(m.attnDropout));
}

// (llama: about the same as GPT, its MLP 3 x 2/3 of GPT's 2 x 4)
std::vector<MemoryPart> languageModelMemory(const Config& c) {
  const auto& m = c.model;
  const double f = 4;  // float32
  const double B = static_cast<double>(c.training.microBatchSize);
  const double V = m.vocabSize, T = m.blockSize, L = m.layers, d = m.embd, H = m.heads;
  const double params = 2 * V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d;
  return {{"parameters, gradients and Adam state (model.vocab_size, model.layers, model.embd)", 4 * f * params},
          {"the causal masks, block_size^2 per layer (model.block_size, model.layers)", f * L * T * T},
          {"one micro-batch's activations (training.micro_batch_size, model.block_size, model.heads, "
           "model.embd, model.layers)",
           f * B * (L * (16 * T * d + 2 * H * T * T) + 2 * T * V)}};
}

void languageModelData(const Config& c, ModelSetup& s) {
  const int64_t blockSize = c.model.blockSize, vocabSize = c.model.vocabSize;
  s.tokensPerSample = blockSize;
  if (c.data.kind == DataKind::Text) {
    s.dataset = std::make_unique<data::TextDataset>(c.data.path, blockSize, c.job.seed);
  } else if (c.data.kind == DataKind::Tokens) {
    s.dataset = std::make_unique<data::TokenFile>(c.data.path, choiceName(tokenDtypeChoices(), c.data.tokenDtype), blockSize, vocabSize, c.job.seed);
  } else {
    s.dataset = std::make_unique<data::SyntheticTokens>(vocabSize, blockSize, c.job.seed);
  }
  s.loss = crossEntropy;
}

std::vector<MemoryPart> fileModelMemory(const Config& c) {
  std::error_code ec;
  const double file = static_cast<double>(std::filesystem::file_size(c.model.path, ec));
  return {{"parameters, gradients and Adam state (model.path: about 4x the file)", ec ? 0.0 : 4 * file}};
}

}  // namespace sluice::modelspecs
