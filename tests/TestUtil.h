// Helpers shared by tests: small models and their captured graphs (defined
// in TestUtil.cpp, compiled once: their bodies instantiate enough of
// LibTorch's templates to cost every test file seconds).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "core/Capture.h"
#include "core/Communicator.h"
#include "core/OpGraph.h"
#include "models/Gpt.h"
#include "partition/Profile.h"
#include "tests/Ranks.h"

namespace sluice::test {

models::GptOptions tinyGpt(int layers = 2);

// Captured where the model's parameters are (a traced graph fixes devices).
// options: attention fused by default, as the trainer captures; tests about
// the op-level attention (cuts inside it, its saved tensors against eager's)
// pass {false}.
OpGraph captureGpt(models::Gpt& gpt, int64_t batch, int64_t seq, const CaptureOptions& options = {});

// The world on one GPU that every rank shares (multi-rank CUDA tests): GPU
// tensors between ranks staged over MPI (NCCL needs a GPU per rank), and
// deterministic kernels (embedding's backward otherwise adds with atomics in
// any order), so that runs compare bitwise where the arithmetic is the same.
Communicator sharedGpuWorld(const c10::Device& gpu);

// A profile of `graph` with random node times (torch::rand, so seeded by
// torch::manual_seed): forward and backward uniform in [0, 1) ms, the
// backward's weight-gradient share uniform in [0, 1), a 2 ms loss forward,
// no saved tensors (so time alone decides a plan).
partition::Profile randomTimesProfile(const OpGraph& graph);

// The language models' loss, as config/models/SpecParts.cpp's: mean cross-entropy
// of [B, T, V] logits against [B, T] next tokens (torch::nn::functional).
at::Tensor tokenCrossEntropy(const at::Tensor& logits, const at::Tensor& target);

}  // namespace sluice::test
