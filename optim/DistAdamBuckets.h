// optim::DistAdam's per-parameter slots and per-bucket buffers (internal:
// shared by optim/DistAdam.cpp and optim/DistAdamState.cpp).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <memory>

#include "core/Communicator.h"
#include "optim/DistAdam.h"
#include "optim/FlatLayout.h"

namespace sluice::optim {

// Per parameter: where its gradient lives and how far this step's
// accumulations got. Per bucket: the flat buffers (FlatLayout.h).
struct DistAdam::Slot {
  torch::Tensor param;
  size_t bucket = 0;
  int64_t offset = 0, numel = 0;  // in the bucket's flat buffer
  int64_t step = 0;
  int accumulated = 0;
  int expected = 1;  // accumulations per step (setAccumulationSteps)
  std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: the hook lives on it
  uintptr_t hookKey = 0;
};

// Note [step buffers]: only `grad` and the moments live between steps; the
// shards and the gather buffer exist from a bucket's reduction to the end of
// its update (step() keeps at most two buckets' gathers in flight), so they
// take memory while activations are gone, and the plan's static bytes
// (weights, gradients, moments / D) are what stays.
struct DistAdam::Bucket {
  FlatBucket layout;
  torch::Tensor grad;        // [shard x ranks], its parameters' .grad share its storage; the padding stays 0
  torch::Tensor expAvg, expAvgSq;  // [shard]
  // Step buffers, defined only during the step:
  torch::Tensor gradShard;   // [shard] this rank's averaged gradient (AllReduce or one rank: `grad` itself)
  torch::Tensor paramShard;  // [shard] this rank's updated parameter elements, to gather (gathers() only)
  torch::Tensor gathered;    // [shard x ranks] (gathers() only)
  int ready = 0;             // parameters whose last accumulation of the step is done
  Work reduce, gather;
};

}  // namespace sluice::optim
