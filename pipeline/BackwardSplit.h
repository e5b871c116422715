// pipeline::BackwardSplit: one micro-batch's backward in two parts, as the
// zero-bubble schedules run it (Schedule.h: BackwardInput, BackwardWeight).
//
// runInput() computes only the gradients of the stage's boundary inputs
// (what the previous stage waits for); runWeight(), later, computes the
// parameters' gradients and accumulates them into .grad. Together they
// produce the same gradients as one backward (the same autograd nodes run on
// the same values; the weight half only re-enters the nodes that feed both).
//
// How (LibTorch autograd, no change to the graph's nodes' math):
// - The "input region" is every autograd node from which a boundary input's
//   gradient accumulator is reachable. Everything else reachable from the
//   roots feeds parameters only (the "weight region"; closed: nothing in it
//   leads back into the input region).
// - A "frontier" node is an input-region node with an edge into the weight
//   region (e.g. AddmmBackward: an edge to the activation, one to the weight).
// - runInput runs the engine from the roots with the input accumulators and
//   every frontier node's inputs as outputs to capture (accumulate_grad off,
//   graph kept): nodes compute only the outputs on a path to what is captured
//   (task_should_compute_output), so frontier nodes skip their weight
//   gradient. It then cuts the frontier nodes' edges into the input region
//   and releases the saved tensors of the input region's other nodes (never
//   needed again).
// - runWeight runs the engine from the frontier nodes (fed the captured
//   gradients) and from the roots that lead straight into the weight region,
//   accumulating into .grad (so gradient hooks, e.g. DistAdam's, fire here),
//   and frees the graph.
// Saved tensors: the input region's non-frontier nodes release theirs after
// runInput; frontier and weight-region nodes keep theirs until runWeight
// (an autograd node unpacks every saved tensor each time it runs, so a
// frontier node reads its weight-side inputs in both halves). With
// saved-tensor hooks (memory plans) each read goes through the hooks
// (Note [split backward memory], memory/StageMemory.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <torch/csrc/autograd/edge.h>

#include <vector>

namespace sluice::pipeline {

class BackwardSplit {
 public:
  // roots/grads: where the stage's output gradients (or the loss's 1) enter
  // autograd; inputs: the boundary inputs (leaves; those not requiring grad
  // are skipped). Returns one gradient per input (undefined where none
  // reached it). Call once.
  std::vector<at::Tensor> runInput(const torch::autograd::edge_list& roots, const std::vector<at::Tensor>& grads,
                                      const std::vector<at::Tensor>& inputs);
  // Accumulates the parameters' gradients; after runInput, once.
  void runWeight();

 private:
  torch::autograd::edge_list weightRoots_;
  std::vector<at::Tensor> weightGrads_;
};

}  // namespace sluice::pipeline
