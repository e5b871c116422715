// core::LossFn: a model's loss, from its output and the micro-batch's target
// to a scalar. The model set-up makes it (models/ModelSetup.h); the last
// stage's worker calls it (pipeline/StageWorker.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace sluice {

using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

}  // namespace sluice
