// The built-in models' rows (config/ModelSpecs.cpp lists them) and what
// their spec files share. Internal to config/.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "config/Config.h"
#include "config/ModelSpec.h"
#include "data/FashionMnist.h"
#include "models/ModelSetup.h"

namespace sluice::modelspecs {

// The rows, one per file.
ModelSpec gpt();
ModelSpec llama();
ModelSpec mlp();
ModelSpec cnn();
ModelSpec torchScript();
ModelSpec exported();

// ConfigError "config error: <message>" unless ok.
void require(bool ok, const std::string& message);

at::Tensor crossEntropy(const at::Tensor& logits, const at::Tensor& target);
// Fashion-MNIST's training split; fewer images than one global batch would
// repeat images inside a step without a word.
std::unique_ptr<data::FashionMnist> fashionMnistTrain(const Config& c);

// GPT and Llama: their shared checks, memory estimate, and data (bytes of
// text, token files, or synthetic tokens; also exported programs' data).
void validateLanguageModel(Config& c);
std::vector<MemoryPart> languageModelMemory(const Config& c);
void languageModelData(const Config& c, ModelSetup& s);
// A model read from model.path: parameters, gradients and Adam state about 4x the file.
std::vector<MemoryPart> fileModelMemory(const Config& c);

// GPT's and Llama's options from the keys they share.
template <class Options>
Options languageModelOptions(const Config& c) {
  Options o;
  o.vocabSize = c.model.vocabSize;
  o.blockSize = c.model.blockSize;
  o.layers = c.model.layers;
  o.heads = c.model.heads;
  o.embd = c.model.embd;
  o.dropout = c.model.dropout;
  o.attnDropout = c.model.attnDropout;
  o.tieEmbeddings = c.model.tieEmbeddings;
  return o;
}

// The language models' keys (gpt and llama).
inline const std::vector<std::string> kLanguageModelKeys = {"vocab_size", "block_size", "layers",       "heads",
                                                           "embd",       "dropout",    "attn_dropout", "tie_embeddings"};

}  // namespace sluice::modelspecs
