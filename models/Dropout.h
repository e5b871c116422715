// Internal to models/: dropout that adds no graph node at p = 0 (model.dropout
// 0 captures no dropout nodes: Note [random streams], core/RandomStream.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/dropout.h>

namespace sluice::models {

inline at::Tensor maybeDropout(const at::Tensor& x, double p, bool training) {
  return p > 0 ? at::dropout(x, p, training) : x;
}

}  // namespace sluice::models
