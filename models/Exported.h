// models::ExportedModel: a program PyTorch wrote with
// torch.export.save(torch.export.export(model, example_args), "m.pt2"),
// trained by Sluice like any model: its forward calls each node's ATen
// operator through LibTorch's dispatcher, so core::capture() records the
// same aten-level graph it records for a C++ module, and capture, profile,
// partition, memory plans, schedules, DistAdam, checkpoints and evaluation
// apply unchanged.
//
// Contract
// - load() reads the archive (models/Pt2Archive.h) and checks the whole
//   program before anything runs. Refused, with ConfigError naming the node,
//   its target and what to do: a target that is not an ATen operator in
//   LibTorch's registry (higher-order ops such as torch.cond or wrapped
//   sub-graphs, Python operators), arguments of kinds Sluice does not map
//   (graphs, custom objects), symbolic shapes (export with static shapes at
//   the job's micro-batch size), inputs that are not one tensor, outputs
//   other than one tensor (and buffer updates), mutated user inputs, effect
//   tokens.
// - holder() is an nn::Module tree registering every parameter and buffer
//   the program reads under its fully qualified name ("model.layers.0.mlp.
//   up_proj.weight"), so capture() lifts them to graph inputs with those
//   names and checkpoints, `sluice export` and model.weights use them. The
//   values start from the archive's.
// - forward() runs the program once: parameters and buffers from holder(),
//   the input given, devices in the program replaced by the parameters'
//   device (the job's), and the boolean "train"/"training" arguments (dropout,
//   batch norm) set by setTraining(): the program is exported in training
//   mode (model.train()), evaluation turns them off (and attention's
//   dropout_p to 0). Assertions on metadata
//   (aten::_assert_tensor_metadata, _assert_async, _assert_scalar) are not
//   run: shapes and dtypes are checked at load.
// - input(): the user input's dtype and sizes (static: batch x ...), output
//   sizes: the output's (e.g. batch x block x vocab).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

namespace sluice::models {

struct ExportedTensor {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> sizes;
};

// The program's one input and one output, its nodes checked as load()
// checks them (the weights are not read): for validating a config before any
// rank starts or anything is written.
struct ExportedSignature {
  ExportedTensor input, output;
};
ExportedSignature readExportedSignature(const std::string& path);

class ExportedModel {
 public:
  static ExportedModel load(const std::string& path);

  std::shared_ptr<torch::nn::Module> holder() const { return holder_; }
  torch::Tensor forward(const std::vector<torch::Tensor>& inputs);
  void setTraining(bool on) { training_ = on; }
  const ExportedTensor& input() const { return input_; }
  const ExportedTensor& output() const { return output_; }
  const std::string& path() const { return path_; }
  // Buffers that are not the model's state (non-persistent, lifted
  // constants): the program reads them, `sluice export` does not write them.
  const std::vector<std::string>& transientBuffers() const { return transient_; }

  // One program node, resolved at load (Exported.cpp).
  struct Step;

 private:
  static ExportedModel loadProgram(const std::string& path);  // load() without its error translation
  std::string path_;
  std::shared_ptr<const nlohmann::json> program_;
  std::shared_ptr<torch::nn::Module> holder_;
  std::vector<std::pair<std::string, std::string>> bound_;  // placeholder name -> FQN
  std::vector<std::pair<std::string, std::string>> updates_;  // buffer FQN <- value name (buffer mutations)
  std::vector<std::string> transient_;
  std::shared_ptr<std::vector<Step>> steps_;
  ExportedTensor input_, output_;
  bool training_ = true;
};

}  // namespace sluice::models
