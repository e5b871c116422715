// Helpers shared by tests: small models and their captured graphs.
#pragma once

#include <torch/torch.h>

#include "core/OpGraph.h"
#include "models/Gpt.h"

namespace sluice::test {

inline models::GptOptions tinyGpt(int layers = 2) {
  models::GptOptions o;
  o.vocabSize = 64;
  o.blockSize = 16;
  o.layers = layers;
  o.heads = 2;
  o.embd = 16;
  return o;
}

inline OpGraph captureGpt(models::Gpt& gpt, int64_t batch, int64_t seq) {
  auto tokens = torch::zeros({batch, seq}, torch::kLong);
  return capture(*gpt, [&](const std::vector<torch::Tensor>& in) { return gpt->forward(in[0]); }, {{"tokens", tokens}});
}

}  // namespace sluice::test
