// Memory accounting for a stage: bytes held by parameters, their gradients and
// the optimizer state. Saved-activation hooks, swap tiers and recompute join
// this folder with the partitioner issue.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace sluice::memory {

int64_t tensorBytes(const std::vector<torch::Tensor>& tensors);
// "1.25 MiB"
std::string formatBytes(int64_t bytes);

}  // namespace sluice::memory
