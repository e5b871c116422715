#include "optim/GradClip.h"

#include "core/Error.h"
#include "optim/DistAdam.h"
#include "optim/OptimizerState.h"

namespace sluice::optim {

GradClip::GradClip(double maxNorm, std::vector<int64_t> globalIndex, int64_t total)
    : maxNorm_(maxNorm), globalIndex_(std::move(globalIndex)), total_(total) {
  SLUICE_CHECK(maxNorm > 0, OptimError, "gradient clipping needs a norm > 0, got " << maxNorm);
  for (int64_t i : globalIndex_) {
    SLUICE_CHECK(i < total_, OptimError, "gradient clipping: parameter index " << i << " of " << total_);
  }
}

torch::Tensor GradClip::apply(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params,
                              const std::vector<const Communicator*>& groups) const {
  torch::NoGradGuard noGrad;
  SLUICE_CHECK(params.size() == globalIndex_.size(), OptimError,
               "gradient clipping: " << params.size() << " parameters, " << globalIndex_.size() << " indices");
  auto* dist = dynamic_cast<DistAdam*>(&optimizer);
  SLUICE_CHECK(dist || dynamic_cast<torch::optim::AdamW*>(&optimizer), OptimError,
               "gradient clipping works with AdamW and DistAdam only");
  const auto device = params.empty() ? torch::Device(torch::kCPU) : params[0].device();
  torch::Tensor squares;
  if (dist) {
    squares = dist->gradSquares(globalIndex_, total_);
  } else {
    squares = torch::zeros({total_}, torch::TensorOptions().dtype(torch::kDouble).device(device));
    std::vector<int64_t> at;
    std::vector<torch::Tensor> norms;
    for (size_t i = 0; i < params.size(); ++i) {
      if (globalIndex_[i] < 0 || !params[i].grad().defined()) continue;
      at.push_back(globalIndex_[i]);
      norms.push_back(at::linalg_vector_norm(params[i].grad(), 2));
    }
    if (!norms.empty()) {
      squares.index_add_(0, torch::tensor(at, torch::kLong).to(device), torch::stack(norms).to(torch::kDouble).square());
    }
  }
  for (const auto* comm : groups) {
    if (comm->size() > 1) comm->allReduce(squares, ReduceOp::Sum);
  }
  auto norm = squares.sum().sqrt();
  auto factor = torch::div(torch::full_like(norm, maxNorm_), norm + 1e-6).clamp_max(1.0).to(torch::kFloat);
  scaleGradients(optimizer, params, factor);
  return norm;
}

}  // namespace sluice::optim
