// Byte counts: totals of tensors and human-readable sizes.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace sluice {

int64_t tensorBytes(const std::vector<torch::Tensor>& tensors);
// "1.25 MiB"
std::string formatBytes(int64_t bytes);
// "1.25 MiB (1310720 bytes)": for messages a user acts on.
std::string formatBytesExact(int64_t bytes);

}  // namespace sluice
