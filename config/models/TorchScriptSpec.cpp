// model.name: torchscript, a module saved by torch.jit.trace or
// torch.jit.script (models/TorchScript.h), on byte windows or images.
#include <filesystem>

#include "config/models/Specs.h"
#include "core/Error.h"
#include "models/TorchScript.h"

namespace sluice::modelspecs {
namespace {

// model.name: torchscript. What the module's forward takes is checked when
// it is loaded (models/TorchScript.h); here: the keys and the data.
void validateTorchScript(Config& c) {
  const auto& m = c.model;
  require(!m.path.empty(), "model.name=torchscript needs model.path: a file saved by torch.jit.trace or torch.jit.script "
                           "(module.save(\"model.pt\")); see docs/models.md, Bring your PyTorch model");
  require(std::filesystem::is_regular_file(m.path), "model.path '" + m.path + "' is not a file (save one from PyTorch "
                                                    "with torch.jit.script(model).save(path))");
  require(!m.inputs.empty(), "model.name=torchscript needs model.inputs: a list of {name, shape, dtype}, one per "
                             "argument of forward (shape without the batch dimension)");
  auto checkSpec = [&](const InputSpec& t, const std::string& key) {
    for (auto d : t.shape) require(d >= 1, key + ".shape: every size must be >= 1");
  };
  for (size_t i = 0; i < m.inputs.size(); ++i) checkSpec(m.inputs[i], "model.inputs[" + std::to_string(i) + "]");
  checkSpec(m.targets, "model.targets");
  require(c.data.kind == DataKind::Text || c.data.kind == DataKind::FashionMnist,
          "model.name=torchscript reads data.name text (byte windows) or fashion_mnist (images); got data.name=" +
              std::string(dataName(c.data.kind)));
  require(m.inputs.size() == 1, "model.inputs: data." + std::string(dataName(c.data.kind)) + " gives each sample one input, so forward must "
                                "take one argument besides the targets; got " + std::to_string(m.inputs.size()));
  if (c.data.kind == DataKind::Text) {
    const auto& in0 = m.inputs[0];
    require(in0.shape.size() == 1 && in0.dtype == InputDtype::Int64,
            "model.inputs[0] (" + in0.name + "): data.name=text gives windows of byte tokens, so the input must be "
            "shape [block_size] with dtype int64");
    require(m.targets.shape == in0.shape && m.targets.dtype == InputDtype::Int64,
            "model.targets: data.name=text gives the next byte of every position, so targets must be shape [" +
                std::to_string(in0.shape[0]) + "] with dtype int64 like model.inputs[0]");
  } else {
    const auto& in0 = m.inputs[0];
    require(in0.shape == std::vector<int64_t>{1, 28, 28} && in0.dtype == InputDtype::Float32,
            "model.inputs[0] (" + in0.name + "): data.name=fashion_mnist gives images of shape [1, 28, 28] with dtype "
            "float32");
    require(m.targets.shape.empty() && m.targets.dtype == InputDtype::Int64,
            "model.targets: data.name=fashion_mnist gives one class label per image: shape [] with dtype int64");
    require(m.loss != LossKind::Mse, "model.loss: data.name=fashion_mnist is classification: use cross_entropy (or none)");
  }
}

ModelSetup buildTorchScript(const Config& c) {
  ModelSetup s;
  std::vector<std::string> names;
  for (auto& in : c.model.inputs) names.push_back(in.name);
  const bool targetsLast = c.model.loss == LossKind::None;
  auto ts = std::make_shared<models::TorchScriptModel>(models::TorchScriptModel::load(c.model.path, names, targetsLast));
  s.module = ts->holder();
  s.forward = [ts](const std::vector<torch::Tensor>& in) { return ts->forward(in); };
  s.setTraining = [ts](bool on) { ts->setTraining(on); };
  s.inputNames = names;
  if (c.data.kind == DataKind::FashionMnist) {
    s.dataset = fashionMnistTrain(c);
  } else {
    const int64_t seqLen = c.model.inputs.at(0).shape.at(0);
    s.tokensPerSample = seqLen;
    s.dataset = std::make_unique<data::TextDataset>(c.data.path, seqLen, c.job.seed);
  }
  if (c.model.loss == LossKind::None) {
    s.targetsAreInputs = true;
    s.inputNames.push_back("targets");  // the graph's second data input
    s.loss = [path = c.model.path](const torch::Tensor& out, const torch::Tensor&) {
      SLUICE_CHECK(out.dim() == 0, GraphError,
                   "model.loss: none, but forward of '" << path << "' returned a tensor of shape " << out.sizes()
                                                       << ", not a scalar loss; return the loss (e.g. .mean())");
      return out;
    };
  } else if (c.model.loss == LossKind::Mse) {
    s.loss = [](const torch::Tensor& out, const torch::Tensor& target) {
      return torch::mse_loss(out, target.to(out.scalar_type()));
    };
  } else {
    s.loss = crossEntropy;
  }
  return s;
}

}  // namespace

ModelSpec torchScript() {
  ModelSpec s;
  s.name = "torchscript";
  s.summary = "a module saved by torch.jit.trace or torch.jit.script";
  s.keys = {"path", "loss", "inputs", "targets"};
  s.images = true;
  s.torchScriptFile = true;
  s.validate = validateTorchScript;
  s.memory = fileModelMemory;
  s.build = buildTorchScript;
  return s;
}

}  // namespace sluice::modelspecs
