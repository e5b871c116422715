// core::Flops: how much work a model is, and how fast this machine's matrix
// products go: together, how close a run comes to the machine's limit.
//
// Model FLOPs (the usual convention of model-FLOPs utilisation): 2 x the
// multiply-adds of the graph's matrix products (matmul, mm, bmm, addmm,
// baddbmm, linear, convolutions, scaled_dot_product_attention), counted per
// node from its traced shapes; elementwise ops, norms and softmax are not
// counted. A training step is 3 x its forward (the backward computes input
// and weight gradients: 2 x); recompute is not model work and is not counted.
//
//   double fwd = forwardFlops(graph, 0, graph.numNodes());     // one micro-batch, forward
//   double peak = measureMatmulRate(device, c10::kFloat);      // FLOP/s, this process's threads
//
// measureMatmulRate runs square matrix products for about `seconds` with the
// threads this process uses; run it on every rank at once (after a barrier)
// to measure what the ranks reach together.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "core/OpGraph.h"

namespace sluice {

// FLOPs of one node's forward (0 for ops that are not matrix products).
double nodeForwardFlops(const OpGraph& graph, const OpNode& node);
// FLOPs of the forward of nodes [first, end).
double forwardFlops(const OpGraph& graph, int first, int end);
// FLOP/s of n x n matrix products in `dtype` on `device` (n = 1024 on CPU).
double measureMatmulRate(const c10::Device& device, c10::ScalarType dtype, double seconds = 0.5);

}  // namespace sluice
