// partition::timeInContext: each node's forward and backward time measured
// where training measures them: inside one forward and one backward of the
// whole graph, as a one-stage job runs them.
//
// Timing a node alone (profileGraph's isolated pass) runs its backward right
// after its forward, on inputs that are hot in cache, and misses what only the
// whole backward does: summing the gradients of a value read by several
// nodes, accumulating into .grad, the engine's own work. Measured with
// bench/partition.sh, stage predictions from isolated sums ran under the
// compute training measured in 7 of 8 stages (most by 4-7%, up to 13%).
// In context:
// - forward: a NodeObserver times each node of NodeProgram::run;
// - backward: a RecordFunction callback (scope BACKWARD_FUNCTION) times every
//   autograd function the engine applies, and its sequence number names the
//   forward node that created it (the observer records which sequence
//   numbers each node's forward took);
// - what no node owns is spread over the nodes: AccumulateGrad (sequence
//   number -1) by parameter bytes, the rest of the backward's wall time and
//   of the forward's by each node's own time.
// So the per-node times sum to the whole graph's measured forward and
// backward. Times are medians over `iterations` after `warmup` runs.
// Gradients accumulate into the leaves' .grad across runs (as every
// micro-batch after a step's first does).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "core/OpGraph.h"

namespace sluice::partition {

struct ContextTimes {
  std::vector<double> forwardSeconds, backwardSeconds;  // per OpGraph node
  double lossForwardSeconds = 0, lossBackwardSeconds = 0;  // with a loss
  double forwardWall = 0, backwardWall = 0;  // medians of the whole passes (with the loss's)
};

using LossFunction = std::function<torch::Tensor(const torch::Tensor&)>;

// inputs: one tensor per graph input, in graph input order; nodeParamBytes:
// per OpGraph node, the parameter bytes it is first to read
// (NodeProfile::paramBytes). loss (optional): applied to the graph's first
// output inside each pass, as the last stage does; the backward then starts
// from it, and the loss's own times come out like a node's (its backward
// functions are those made after the graph's forward).
ContextTimes timeInContext(const OpGraph& g, const std::vector<torch::Tensor>& inputs,
                           const std::vector<int64_t>& nodeParamBytes, int warmup, int iterations,
                           const LossFunction& loss = {});

}  // namespace sluice::partition
