// model.name: cnn, conv-BN-ReLU-pool blocks (models/Cnn.h) on Fashion-MNIST images.
#include <cmath>

#include "config/models/Specs.h"
#include "models/Cnn.h"

namespace sluice::modelspecs {
namespace {

void validateCnn(Config& c) {
  const auto& m = c.model;
  require(!m.channels.empty() && m.channels.size() <= 4,
          "model.channels must list 1 to 4 block widths (each block halves the 28x28 image), got " +
              std::to_string(m.channels.size()));
  for (auto ch : m.channels) require(ch >= 1, "model.channels: every width must be >= 1");
  require(m.classes >= 1, "model.classes must be >= 1");
  require(c.data.kind == DataKind::FashionMnist, "model.name=cnn needs data.name=fashion_mnist (images)");
  require(m.classes == 10, "model.classes must be 10 for fashion_mnist, got " + std::to_string(m.classes));
}

std::vector<MemoryPart> cnnMemory(const Config& c) {
  const auto& m = c.model;
  const double f = 4;  // float32
  const double B = static_cast<double>(c.training.microBatchSize);
  double params = 0, act = 0, in = 1, size = 28;
  for (auto ch : m.channels) {
    params += 9 * in * ch + 3 * ch;
    act += 6 * ch * size * size;
    in = static_cast<double>(ch);
    size = std::floor(size / 2);
  }
  params += in * size * size * m.classes;
  return {{"parameters, gradients and Adam state (model.channels)", 4 * f * params},
          {"one micro-batch's activations (training.micro_batch_size, model.channels)", f * B * act}};
}

ModelSetup buildCnn(const Config& c) {
  ModelSetup s;
  models::CnnOptions o;
  o.channels = c.model.channels;
  o.classes = c.model.classes;
  auto cnn = models::Cnn(o);
  setModule(s, cnn);
  s.dataset = fashionMnistTrain(c);
  s.loss = crossEntropy;
  return s;
}

}  // namespace

ModelSpec cnn() {
  ModelSpec s;
  s.name = "cnn";
  s.summary = "conv-BN-ReLU-pool blocks on Fashion-MNIST images";
  s.keys = {"classes", "channels"};
  s.images = true;
  s.validate = validateCnn;
  s.memory = cnnMemory;
  s.build = buildCnn;
  return s;
}

}  // namespace sluice::modelspecs
