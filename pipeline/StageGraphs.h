// pipeline::StageGraphs: a stage's micro-batch work as CUDA graphs
// (pipeline.execution: graphs), captured on first use and replayed after.
//
// Note [graphed stages]
// - Slots. A micro-batch takes a slot when its forward starts and gives it
//   back when its backward is complete (its W under a split backward);
//   SlotPool hands out the lowest free slot. So a stage has as many slots as
//   the schedule keeps micro-batches in flight (peakInFlight, Schedule.h),
//   not one per micro-batch, and memory grows with the slots.
// - Capture. A slot's first forward for an input signature (shapes, dtypes,
//   which inputs need gradients) runs kWarmups times eagerly on a side
//   stream with its backward (autograd::grad: nothing accumulated), then is
//   captured, node by node as eager runs it: the forward (and the last
//   stage's loss) into one graph, and the backward (autograd::grad of the
//   outputs, or of the loss, for the inputs that need gradients and the
//   trainable parameters) into a second, in the first's memory pool. A slot's
//   graphs replay in the order they were captured (forward, then backward),
//   so they share the pool safely; slots do not share pools, as the
//   schedule interleaves them. The warm-ups' updates of buffers (BatchNorm's
//   running statistics) are undone, so buffers change once per micro-batch
//   as in eager. Captures run in thread-local mode (other threads' CUDA
//   calls, the NCCL watchdog's, do not break them). A capture that fails
//   ends the job with its cause: the generators are left in capture mode,
//   so there is no falling back to eager. Ops that cannot be captured
//   (aten::multinomial, anything that reads a tensor on the host) fail so.
// - Replay. A forward copies its inputs into the slot's static inputs and
//   replays; a backward copies the output gradients (or the loss scale) into
//   the slot's static seeds and replays, leaving the inputs' gradients and
//   the parameters' in static buffers. Outputs and input gradients are
//   returned as copies: the slot's buffers are overwritten by its next use.
// - Random nodes (Note [random streams], core/RandomStream.h). Each has a
//   CUDA generator of its own, registered with every forward graph before
//   capture. While a forward is captured, a RandomNodeHook swaps the default
//   generator's state for the node's just before the node runs (a generator
//   cannot be reseeded while it is captured). Before each replay every one
//   is reseeded with streamSeed(key, node), offset 0: the Philox key and
//   offset eager draws with, so a replay draws what eager draws.
// - Gradients. accumulateWeights adds the slot's parameter gradients to the
//   .grad of the step's parameter leaves (Note [reader gradients],
//   RankWorker.h), when the schedule runs B (or W), in that order: as
//   autograd's accumulation does in eager, so the sums are bitwise eager's.
// - A split backward (zb-h1, interleaved-zb, zbv): Bi replays the whole
//   backward and W only accumulates; the split's saving is not captured yet.
// - Not with memory plans (swap, recompute), DistAdam's hooks mode or
//   logging.measure_memory (config/ConfigValidate.cpp refuses them).
//
// makeStageGraphs is CUDA-only code (pipeline/CudaStageGraphs.cpp); in a
// build without CUDA (pipeline/NoCuda.cpp) it throws GraphError, and in
// either it throws GraphError for a stage that does not run on a CUDA device.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/RandomStream.h"

namespace sluice::pipeline {

// A micro-batch's slot (see the Note).
class SlotPool {
 public:
  // The lowest free slot, now held by `microBatch`; GraphError when it holds one already.
  int acquire(int microBatch);
  // GraphError when `microBatch` holds no slot.
  void release(int microBatch);
  int slotOf(int microBatch) const;  // -1: none
  int size() const { return static_cast<int>(holder_.size()); }  // the most slots held at once so far
  int held() const;

 private:
  std::vector<int> holder_;  // per slot: the micro-batch holding it, -1 free
};

// One forward, as the capture runs it eagerly: the stage graph's outputs
// and, on the last stage, the loss (else undefined).
struct GraphedForward {
  std::vector<at::Tensor> outputs;
  at::Tensor loss;
};
using StageForwardFn = std::function<GraphedForward(const std::vector<at::Tensor>& inputs)>;

class StageGraphs {
 public:
  static constexpr int kWarmups = 3;
  virtual ~StageGraphs() = default;
  // Micro-batch forward in `slot`. inputs: the stage's (boundary or data
  // inputs, and the target last on the last stage), requiring gradients
  // where the stage differentiates them; paramLeaves: the parameter entries
  // the step's forwards read. `run` computes the forward eagerly (used to
  // warm up and to capture, on first use).
  virtual GraphedForward forward(int slot, const std::vector<at::Tensor>& inputs, const RandomKey& key,
                                 const std::vector<at::Tensor>& paramLeaves, const StageForwardFn& run) = 0;
  // The slot's backward. outputGrads: per output (undefined where the next
  // stage sends none); the last stage passes none and seeds the loss with
  // lossScale. Returns the inputs' gradients (undefined where none).
  virtual std::vector<at::Tensor> backward(int slot, const std::vector<at::Tensor>& outputGrads, double lossScale) = 0;
  // Adds the slot's last backward's parameter gradients to paramLeaves' .grad.
  virtual void accumulateWeights(int slot, const std::vector<at::Tensor>& paramLeaves) = 0;
  virtual int graphsCaptured() const = 0;  // forward and backward graphs, over all slots and signatures
};

// randomNodes: the stream ids of the stage's random nodes (randomStreamIds);
// outputNeedsGrad: per stage output, whether the next stage sends its gradient.
std::unique_ptr<StageGraphs> makeStageGraphs(const c10::Device& device, const std::string& stageName,
                                             std::vector<int> randomNodes, std::vector<bool> outputNeedsGrad);

}  // namespace sluice::pipeline
