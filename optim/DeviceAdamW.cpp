#include <torch/optim/adamw.h>
#include <torch/types.h>

#include <cmath>

#include "optim/FusedAdamW.h"

namespace sluice::optim {

// torch::optim::AdamW's sequence of tensor ops, on the tensors' device.
void adamWOnDevice(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& expAvg, const at::Tensor& expAvgSq,
                   const AdamWStep& s) {
  torch::NoGradGuard noGrad;
  const double bc1 = 1 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bc2 = 1 - std::pow(s.beta2, static_cast<double>(s.step));
  auto param = p, m = expAvg, v = expAvgSq;
  param.mul_(1 - s.lr * s.weightDecay);
  m.mul_(s.beta1).add_(grad, 1 - s.beta1);
  v.mul_(s.beta2).addcmul_(grad, grad, 1 - s.beta2);
  auto denom = (v.sqrt() / std::sqrt(bc2)).add_(s.eps);
  param.addcdiv_(m, denom, -s.lr / bc1);
}

}  // namespace sluice::optim
