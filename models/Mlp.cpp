#include "models/Mlp.h"

namespace sluice::models {

MlpImpl::MlpImpl(const MlpOptions& o) {
  layers_ = register_module("layers", torch::nn::ModuleList());
  int64_t in = o.inputDim;
  for (int64_t i = 0; i < o.layers; ++i) {
    layers_->push_back(torch::nn::Linear(in, o.hidden));
    in = o.hidden;
  }
  head_ = register_module("head", torch::nn::Linear(in, o.classes));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  auto h = x;
  for (auto& m : *layers_) h = torch::gelu(m->as<torch::nn::Linear>()->forward(h));
  return head_->forward(h);
}

}  // namespace sluice::models
