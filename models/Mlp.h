// An MLP classifier: `layers` hidden Linear+GELU layers of width `hidden`,
// then a Linear to `classes` logits. Module paths: layers.<i>, head.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

namespace sluice::models {

struct MlpOptions {
  int64_t inputDim = 784;
  int64_t hidden = 256;
  int64_t layers = 2;
  int64_t classes = 10;
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& o);
  // x: float [B, inputDim] -> logits [B, classes]
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::ModuleList layers_;
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace sluice::models
