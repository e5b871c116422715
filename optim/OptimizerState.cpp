#include "optim/OptimizerState.h"

#include "core/Error.h"
#include "optim/DistAdam.h"

namespace sluice::optim {
namespace {

// LibTorch keys optimizer state by the parameter's TensorImpl.
void* keyOf(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }

}  // namespace

std::vector<AdamState> adamState(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  std::vector<AdamState> out;
  if (auto* dist = dynamic_cast<DistAdam*>(&optimizer)) {
    for (auto& f : dist->fullState()) out.push_back({f.expAvg, f.expAvgSq, f.step});
    SLUICE_CHECK(out.size() == params.size(), OptimError,
                 "DistAdam holds " << out.size() << " parameters, " << params.size() << " were named");
    return out;
  }
  SLUICE_CHECK(dynamic_cast<torch::optim::AdamW*>(&optimizer), OptimError,
               "optimizer state: only AdamW and DistAdam can be checkpointed");
  auto& state = optimizer.state();
  for (auto& p : params) {
    AdamState a;
    auto it = state.find(keyOf(p));
    if (it != state.end()) {
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      a.expAvg = s.exp_avg().clone();
      a.expAvgSq = s.exp_avg_sq().clone();
      a.step = s.step();
    }
    out.push_back(std::move(a));
  }
  return out;
}

void setAdamState(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params,
                  const std::vector<AdamState>& state) {
  SLUICE_CHECK(state.size() == params.size(), OptimError,
               "optimizer state for " << state.size() << " parameters, the optimizer has " << params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!state[i].expAvg.defined()) continue;
    SLUICE_CHECK(state[i].expAvg.sizes() == params[i].sizes() && state[i].expAvgSq.sizes() == params[i].sizes(),
                 OptimError,
                 "optimizer state of parameter " << i << " has shape " << state[i].expAvg.sizes()
                                                 << ", the parameter " << params[i].sizes());
  }
  if (auto* dist = dynamic_cast<DistAdam*>(&optimizer)) {
    std::vector<DistAdam::FullState> full;
    for (size_t i = 0; i < params.size(); ++i) {
      auto& a = state[i];
      full.push_back({a.expAvg.defined() ? a.expAvg : torch::zeros_like(params[i]),
                      a.expAvgSq.defined() ? a.expAvgSq : torch::zeros_like(params[i]), a.step});
    }
    dist->setFullState(full);
    return;
  }
  SLUICE_CHECK(dynamic_cast<torch::optim::AdamW*>(&optimizer), OptimError,
               "optimizer state: only AdamW and DistAdam can be checkpointed");
  auto& s = optimizer.state();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& a = state[i];
    if (!a.expAvg.defined()) {
      s.erase(keyOf(params[i]));
      continue;
    }
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(a.step);
    // Loaded state (host tensors from a checkpoint) goes where the parameter is.
    st->exp_avg(a.expAvg.to(params[i].device(), /*non_blocking=*/false, /*copy=*/true));
    st->exp_avg_sq(a.expAvgSq.to(params[i].device(), /*non_blocking=*/false, /*copy=*/true));
    s[keyOf(params[i])] = std::move(st);
  }
}

void zeroGradients(torch::optim::Optimizer& optimizer) {
  if (auto* dist = dynamic_cast<DistAdam*>(&optimizer)) {
    dist->zero_grad();
  } else {
    optimizer.zero_grad(/*set_to_none=*/false);
  }
}

void scaleGradients(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params,
                    const torch::Tensor& factor) {
  torch::NoGradGuard noGrad;
  if (auto* dist = dynamic_cast<DistAdam*>(&optimizer)) {
    dist->scaleGradients(factor);
    return;
  }
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(factor);
  }
}

}  // namespace sluice::optim
