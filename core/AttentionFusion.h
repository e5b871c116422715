// core::fuseCausalAttention: causal self-attention written out op by op
// (GPT-2 / nanoGPT style, models/Gpt.cpp) rewritten in a traced graph into
// one aten::scaled_dot_product_attention node.
//
// Note [attention fusion]
// The pattern, in the traced IR:
//   a = matmul(q, transpose(k, -2, -1)) * c        (or / c; c a constant)
//   a = masked_fill(a, eq(mask, 0), -inf)          mask: slices of a graph input
//   p = softmax(a, -1)                             [dropout(p, 0, train)]
//   y = matmul(p, v)
// becomes y = scaled_dot_product_attention(q, k, v, None, 0.0, is_causal=True,
// scale=c (or 1/c)). The rewrite happens only when every condition holds,
// else the nodes stay as written:
//  - q, k, v are 4-D [B, H, L, E] float32 tensors on the CPU with the same
//    B, H and E, and L == S (queries and keys of one sequence). Not bfloat16:
//    CPU's fused backward runs 4x slower there than the ops as written
//    (1 thread, [4, 6, 128, 32]: 6.9 ms against 1.6 ms), while float32's is
//    faster (2.0 against 2.5 ms, forward 0.9 against 1.6 ms). Not CUDA yet:
//    its memory-efficient backward adds with atomics, which would end
//    bitwise equality across layouts, and no GPU here measures the rest;
//  - the mask, computed from the captured input's values by the graph's own
//    slices, equals tril(ones(L, S)) in its last two dimensions (size 1 in
//    the others): exactly the causal mask is_causal applies;
//  - the fill is -inf, the softmax over the last dimension with no dtype;
//  - every intermediate (the scores, the masked scores, p) has one reader,
//    the next node of the pattern (a model that returns its attention
//    weights keeps them);
//  - no dropout of probability > 0 on p: CPU's fused kernel has no dropout, a
//    drawing dropout keeps its own layout-independent stream, and the same
//    decision in eval mode (train False) keeps the evaluation graph node for
//    node the training graph (train/Evaluation.h).
//
// Why: the fused kernel reads q, k and v once per block and saves q, k, v,
// its output and the row log-sum-exp for backward instead of the L x S
// weights (quickstart GPT: 85 -> 79 ms forward + backward per micro-batch on
// one thread, saved activations 30.9 -> 24.8 MiB). The result is the same
// function in another summation order: within float tolerance of the graph as
// written (about 1e-7 relative), and bitwise equal across layouts, since
// every layout runs the same captured graph (the correctness contract).
// `model.fuse_attention: false` keeps the graph as written.
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace torch::jit {
struct Graph;
}

namespace sluice {

// Rewrites each match in place; inputs[i] is the value of graph input i (the
// traced stack: data, parameters, buffers). Returns how many were fused.
// Leaves the replaced nodes without readers (EliminateDeadCode removes them).
int fuseCausalAttention(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs);

}  // namespace sluice
