// Helpers shared by tests: small models and their captured graphs.
#pragma once

#include <torch/torch.h>

#include "core/Communicator.h"
#include "core/OpGraph.h"
#include "models/Gpt.h"
#include "partition/Profile.h"

namespace sluice::test {

inline models::GptOptions tinyGpt(int layers = 2) {
  models::GptOptions o;
  o.vocabSize = 64;
  o.blockSize = 16;
  o.layers = layers;
  o.heads = 2;
  o.embd = 16;
  return o;
}

// Captured where the model's parameters are (a traced graph fixes devices).
// options: attention fused by default, as the trainer captures; tests about
// the op-level attention (cuts inside it, its saved tensors against eager's)
// pass {false}.
inline OpGraph captureGpt(models::Gpt& gpt, int64_t batch, int64_t seq, const CaptureOptions& options = {}) {
  auto tokens = torch::zeros({batch, seq}, torch::TensorOptions().dtype(torch::kLong).device(gpt->parameters()[0].device()));
  return capture(*gpt, [&](const std::vector<torch::Tensor>& in) { return gpt->forward(in[0]); }, {{"tokens", tokens}},
                 options);
}

// The world on one GPU that every rank shares (multi-rank CUDA tests): GPU
// tensors between ranks staged over MPI (NCCL needs a GPU per rank), and
// deterministic kernels (embedding's backward otherwise adds with atomics in
// any order), so that runs compare bitwise where the arithmetic is the same.
inline Communicator sharedGpuWorld(const c10::Device& gpu) {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  return Communicator::world().withDeviceBackend(CommBackendKind::Mpi, gpu);
}

// A profile of `graph` with random node times (torch::rand, so seeded by
// torch::manual_seed): forward and backward uniform in [0, 1) ms, the
// backward's weight-gradient share uniform in [0, 1), a 2 ms loss forward,
// no saved tensors (so time alone decides a plan).
inline partition::Profile randomTimesProfile(const OpGraph& graph) {
  const int n = graph.numNodes();
  partition::Profile profile;
  profile.graphHash = graph.hash();
  profile.facts.outputs.assign(n, {});
  profile.facts.writesParameter.assign(n, 0);
  auto t = torch::rand({n, 3}, torch::kDouble);
  for (int j = 0; j < n; ++j) {
    partition::NodeProfile p;
    p.index = j;
    p.forwardSeconds = t[j][0].item<double>() * 1e-3;
    p.backwardSeconds = t[j][1].item<double>() * 1e-3;
    p.weightBackwardSeconds = p.backwardSeconds * t[j][2].item<double>();
    profile.nodes.push_back(p);
  }
  profile.lossForwardSeconds = 2e-3;
  return profile;
}

}  // namespace sluice::test
