#include "models/Cnn.h"

#include <string>

namespace sluice::models {

CnnImpl::CnnImpl(const CnnOptions& o) {
  auto blocks = register_module("blocks", torch::nn::ModuleList());
  int64_t in = o.inChannels, size = o.imageSize;
  for (size_t i = 0; i < o.channels.size(); ++i) {
    auto block = std::make_shared<torch::nn::Module>();
    Block b;
    b.conv = block->register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, o.channels[i], 3).padding(1).bias(false)));
    b.bn = block->register_module("bn", torch::nn::BatchNorm2d(o.channels[i]));
    blocks->push_back(block);
    blocks_.push_back(b);
    in = o.channels[i];
    size /= 2;
  }
  head_ = register_module("head", torch::nn::Linear(in * size * size, o.classes));
}

torch::Tensor CnnImpl::forward(const torch::Tensor& x) {
  auto h = x;
  for (auto& b : blocks_) h = torch::max_pool2d(torch::relu(b.bn->forward(b.conv->forward(h))), 2);
  return head_->forward(h.flatten(1));
}

}  // namespace sluice::models
