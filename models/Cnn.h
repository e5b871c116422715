// A CNN classifier for small images: per entry of `channels` a block
// conv 3x3 (padding 1, no bias: BatchNorm removes it) -> BatchNorm2d -> ReLU -> max-pool 2x2, then a Linear
// from the flattened features to `classes` logits. Module paths:
// blocks.<i>.conv, blocks.<i>.bn (running_mean, running_var,
// num_batches_tracked are buffers), head.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <vector>

namespace sluice::models {

struct CnnOptions {
  std::vector<int64_t> channels{32, 64};
  int64_t classes = 10;
  int64_t inChannels = 1, imageSize = 28;
};

class CnnImpl : public torch::nn::Module {
 public:
  explicit CnnImpl(const CnnOptions& o);
  // x: float [B, inChannels, imageSize, imageSize] -> logits [B, classes]
  torch::Tensor forward(const torch::Tensor& x);

 private:
  struct Block {
    torch::nn::Conv2d conv{nullptr};
    torch::nn::BatchNorm2d bn{nullptr};
  };
  std::vector<Block> blocks_;
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Cnn);

}  // namespace sluice::models
