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

// Params of `module` in the order a stage graph lists them.
inline std::vector<torch::Tensor> paramsByName(torch::nn::Module& module, const std::vector<std::string>& names) {
  auto params = module.named_parameters(true);
  auto buffers = module.named_buffers(true);
  std::vector<torch::Tensor> out;
  for (auto& n : names) {
    if (auto* p = params.find(n)) {
      out.push_back(*p);
    } else {
      out.push_back(buffers[n]);
    }
  }
  return out;
}

}  // namespace sluice::test
