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
// - Note [time until the next start]: a node's (or autograd function's) time
//   runs from its start to the next one's start, not to its own return. The
//   work between the two is the finished one's: the interpreter freeing the
//   values it read last; the engine releasing what the function saved and
//   adding its outputs into the next functions' input buffers. That work
//   scales with the node's tensors, not with its compute: spread by compute
//   time (as before), the ~5-8% of a backward it takes went mostly to the LM
//   head and loss, and a light first stage of many small ops measured 10-12%
//   slower than predicted (bench/partition.sh, large_vocab uniform and
//   parameters); attributed this way, -6%;
// - what no node owns is spread over the nodes: AccumulateGrad (sequence
//   number -1, with the engine's work after it) by parameter bytes, the rest
//   of the backward's wall time and of the forward's (the first start, the
//   last return) by each node's own time.
// So the per-node times sum to the whole graph's measured forward and
// backward. Times are medians over `iterations` after `warmup` runs.
// Gradients accumulate into the leaves' .grad across runs (as every
// micro-batch after a step's first does).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "core/OpGraph.h"
#include "partition/Timing.h"

namespace sluice::partition {

struct ContextTimes {
  std::vector<double> forwardSeconds, backwardSeconds;  // per OpGraph node
  double lossForwardSeconds = 0, lossBackwardSeconds = 0;  // with a loss
  double forwardWall = 0, backwardWall = 0;  // medians of the whole passes (with the loss's)
};

// One timed piece of work: a node's forward or an autograd function's apply.
struct Interval {
  Clock::time_point start, end;
};

// Per interval (in the given order), seconds from its start to the next
// interval's start in start order, or to its own end when that is later (the
// last: to its own end). Note [time until the next start].
std::vector<double> secondsUntilNextStart(const std::vector<Interval>& intervals);

using LossFunction = std::function<at::Tensor(const at::Tensor&)>;

// inputs: one tensor per graph input, in graph input order; nodeParamBytes:
// per OpGraph node, the parameter bytes it is first to read
// (NodeProfile::paramBytes). loss (optional): applied to the graph's first
// output inside each pass, as the last stage does; the backward then starts
// from it, and the loss's own times come out like a node's (its backward
// functions are those made after the graph's forward).
ContextTimes timeInContext(const OpGraph& g, const std::vector<at::Tensor>& inputs,
                           const std::vector<int64_t>& nodeParamBytes, int warmup, int iterations,
                           const LossFunction& loss = {});

}  // namespace sluice::partition
