// optim::GradClip: gradient clipping by the global L2 norm of a job split
// into pipeline stages and data-parallel replicas, as
// torch.nn.utils.clip_grad_norm_ does for one model in one process.
//
//   optim::GradClip clip(1.0, globalIndex, totalParameters);
//   loss.backward();                                        // every micro-batch
//   auto norm = clip.apply(optimizer, params, {&dp, &pp});  // collective
//   optimizer.step();
//
// norm = sqrt(sum over the job's parameters p of |grad p|^2), the gradient
// being the one the update uses (averaged over replicas), each element once;
// every gradient is then multiplied by min(1, maxNorm / (norm + 1e-6)), the
// same factor on every rank (PyTorch's formula, so it always multiplies).
//
// Note [bitwise norm]: the squares go into a vector with one float64 entry
// per parameter of the job (globalIndex: the job-wide order, the same on
// every rank), each filled by the ranks that hold a share of that gradient
// (one stage; DistAdam: its replicas' shards, AllReduce mode: the first
// replica) and zeros elsewhere. The vector is summed over `groups` (adding
// zeros is exact), then summed in index order on every rank: the norm's bits
// do not depend on the cuts or the schedule, so pipeline layouts keep giving
// bitwise the 1-stage losses. A tied copy (Note [tied parameters],
// train/RankTopology.h) has index -1 on all but one of its holders.
//
// Contract: apply() runs between the step's last backward and step(); it
// reads nothing on the host (the norm stays a device tensor: read it at a
// log point). Works with torch::optim::AdamW and optim::DistAdam (which
// finishes its reductions in it); OptimError for another optimizer.
#pragma once

#include <torch/optim/optimizer.h>

#include <vector>

#include "core/Communicator.h"

namespace sluice::optim {

class GradClip {
 public:
  // globalIndex[i]: trainable parameter i's entry among the job's `total`;
  // -1: another rank counts it. maxNorm > 0.
  GradClip(double maxNorm, std::vector<int64_t> globalIndex, int64_t total);

  // Collective over every communicator of `groups` (all ranks of each call
  // it, in the same order). Returns the global norm: a float64 scalar on the
  // parameters' device.
  at::Tensor apply(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                      const std::vector<const Communicator*>& groups) const;

  double maxNorm() const { return maxNorm_; }

 private:
  double maxNorm_;
  std::vector<int64_t> globalIndex_;
  int64_t total_;
};

}  // namespace sluice::optim
