// model.name: mlp, an MLP classifier (models/Mlp.h) on synthetic vectors.
#include <algorithm>

#include "config/models/Specs.h"
#include "models/Mlp.h"

namespace sluice::modelspecs {
namespace {

void validateMlp(Config& c) {
  const auto& m = c.model;
  for (auto [key, v] : {std::pair<const char*, int64_t>{"model.input_dim", m.inputDim}, {"model.hidden", m.hidden},
                        {"model.mlp_layers", m.mlpLayers}, {"model.classes", m.classes}}) {
    require(v >= 1, std::string(key) + " must be >= 1, got " + std::to_string(v));
  }
  require(c.data.kind == DataKind::Synthetic, "model.name=mlp needs data.name=synthetic (text data is for gpt)");
  // Its graph is small and known: per hidden layer t, addmm, gelu; the head
  // t, addmm; every boundary between them a valid cut. More pieces than
  // ops cannot be cut: say so now, not after starting that many ranks.
  const int64_t ops = 3 * m.mlpLayers + 2;
  const int64_t pieces = static_cast<int64_t>(c.pipeline.stages) * std::max(1, c.pipeline.chunks);
  require(pieces <= ops, "model.name=mlp with model.mlp_layers " + std::to_string(m.mlpLayers) + " has " +
                             std::to_string(ops) + " ops, so it splits into at most " + std::to_string(ops) +
                             " pieces; pipeline.stages (" + std::to_string(c.pipeline.stages) + ") x " +
                             std::to_string(std::max(1, c.pipeline.chunks)) + " per rank asks for " +
                             std::to_string(pieces) + ": lower pipeline.stages or raise model.mlp_layers");
}

std::vector<MemoryPart> mlpMemory(const Config& c) {
  const auto& m = c.model;
  const double f = 4;  // float32
  const double B = static_cast<double>(c.training.microBatchSize);
  const double params = m.inputDim * m.hidden + (m.mlpLayers - 1.0) * m.hidden * m.hidden + m.hidden * m.classes;
  return {{"parameters, gradients and Adam state (model.input_dim, model.hidden, model.mlp_layers)", 4 * f * params},
          {"one micro-batch's activations (training.micro_batch_size, model.hidden)",
           f * B * 4 * (m.inputDim + m.mlpLayers * m.hidden)}};
}

ModelSetup buildMlp(const Config& c) {
  ModelSetup s;
  models::MlpOptions o;
  o.inputDim = c.model.inputDim;
  o.hidden = c.model.hidden;
  o.layers = c.model.mlpLayers;
  o.classes = c.model.classes;
  auto mlp = models::Mlp(o);
  setModule(s, mlp);
  s.dataset = std::make_unique<data::SyntheticClassification>(o.inputDim, o.classes, c.job.seed);
  s.loss = crossEntropy;
  return s;
}

}  // namespace

ModelSpec mlp() {
  ModelSpec s;
  s.name = "mlp";
  s.summary = "an MLP classifier on synthetic vectors";
  s.keys = {"input_dim", "hidden", "mlp_layers", "classes"};
  s.validate = validateMlp;
  s.memory = mlpMemory;
  s.build = buildMlp;
  return s;
}

}  // namespace sluice::modelspecs
