// models::TorchScriptModel: a module PyTorch saved with torch.jit.trace or
// torch.jit.script (module.save(path)), trained by Sluice with no change to
// the model code.
//
// Contract
// - load() reads the file (ConfigError when it is not TorchScript), checks
//   forward's arguments against the declared inputs (their number, all
//   Tensors) and rejects a forward whose control flow depends on tensor values
//   (an if or loop whose condition reads a tensor's data): capture would bake
//   in the branch the example batch took. The error names the node, the
//   source line saved in the file, and what to change.
// - holder() is an nn::Module mirroring the script module's tree that
//   registers the very same parameter and buffer tensors under the same
//   module paths ("enc.self_attn.in_proj_weight"), so core::capture() lifts
//   them to graph inputs with those names, and the values training writes are
//   the script module's own. Parameters start from the values in the file.
// - forward() runs the script module's forward in training mode; its result
//   must be one tensor (GraphError naming what it returned otherwise).
// - exportModule() writes the file at `source` with every parameter and
//   buffer replaced by the tensor of the same name, atomically (temp file,
//   then rename), so torch.jit.load in Python reads the trained model.
#pragma once

#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace sluice::models {

class TorchScriptModel {
 public:
  // targetsLast: forward also takes the targets, after the inputs (model.loss: none).
  static TorchScriptModel load(const std::string& path, const std::vector<std::string>& inputNames,
                               bool targetsLast = false);

  std::shared_ptr<torch::nn::Module> holder() const { return holder_; }
  torch::Tensor forward(const std::vector<torch::Tensor>& inputs);
  // Training (the default after load) or eval mode, recursively.
  void setTraining(bool on);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::shared_ptr<torch::jit::Module> module_;
  std::shared_ptr<torch::nn::Module> holder_;
};

// Every parameter and buffer of the module at `source`, by module path.
std::vector<std::string> torchScriptTensorNames(const std::string& source);

void exportModule(const std::string& source, const std::map<std::string, torch::Tensor>& tensors,
                  const std::string& out);

}  // namespace sluice::models
