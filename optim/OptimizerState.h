// optim::adamState / setAdamState: an Adam-family optimizer's state, per
// parameter and in the parameter's shape, whatever the optimizer keeps
// internally: what checkpoints store, so that they load into another
// data-parallel degree or another optimizer of the family.
//
// Works for torch::optim::AdamW and optim::DistAdam (collective over its
// data-parallel group: every rank of it must call). Before the first step a
// torch::optim::AdamW has no state: the entries are undefined then, and
// setAdamState with undefined entries leaves the optimizer without state.
// Throws OptimError for another optimizer or mismatched shapes.
#pragma once

#include <torch/optim/optimizer.h>

#include <vector>

namespace sluice::optim {

struct AdamState {
  at::Tensor expAvg, expAvgSq;  // parameter-shaped; undefined: no state yet
  int64_t step = 0;
};

std::vector<AdamState> adamState(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params);
void setAdamState(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                  const std::vector<AdamState>& state);

// Zeroes every gradient in place, never setting it to none (LibTorch 2.x's
// Optimizer::zero_grad() default, which it does not let a subclass override):
// DistAdam's gradients live in its buckets and must stay bound there (its own
// zero_grad also drops an abandoned step's reductions), and AdamW's then keep
// their buffers, so a step allocates what the memory plan counted.
void zeroGradients(torch::optim::Optimizer& optimizer);

// Multiplies the gradients the update will use by factor (a scalar tensor on
// the parameters' device, or a number): DistAdam's reduced shards (it
// finishes its reductions first), else each parameter's gradient. Reads
// nothing on the host. Clipping and fp16 unscaling both go through it.
void scaleGradients(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                    const at::Tensor& factor);

}  // namespace sluice::optim
