#include "tests/TestUtil.h"

#include <torch/nn/functional/loss.h>
#include <torch/types.h>

namespace sluice::test {

models::GptOptions tinyGpt(int layers) {
  models::GptOptions o;
  o.vocabSize = 64;
  o.blockSize = 16;
  o.layers = layers;
  o.heads = 2;
  o.embd = 16;
  return o;
}

OpGraph captureGpt(models::Gpt& gpt, int64_t batch, int64_t seq, const CaptureOptions& options) {
  auto tokens = torch::zeros({batch, seq}, torch::TensorOptions().dtype(torch::kLong).device(gpt->parameters()[0].device()));
  return capture(*gpt, [&](const std::vector<torch::Tensor>& in) { return gpt->forward(in[0]); }, {{"tokens", tokens}},
                 options);
}

Communicator sharedGpuWorld(const c10::Device& gpu) {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  return test::world().withDeviceBackend(CommBackendKind::Mpi, gpu);
}

partition::Profile randomTimesProfile(const OpGraph& graph) {
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

at::Tensor tokenCrossEntropy(const at::Tensor& logits, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

}  // namespace sluice::test
