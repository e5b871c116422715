// models::ModelSetup: a model as a job runs it: the module (built from
// job.seed, so every rank holds identical initial weights), its forward for
// capture, its loss and its dataset, and the capture itself. A model's spec
// builds one from the config (config/ModelSpec.h); train/ModelFromConfig.h
// adds what every model shares (model.weights, training.precision).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/Capture.h"
#include "core/LossFn.h"
#include "core/OpGraph.h"
#include "data/Dataset.h"

namespace sluice {

struct ModelSetup {
  std::shared_ptr<torch::nn::Module> module;
  ForwardFn forward;
  LossFn loss;
  std::unique_ptr<data::Dataset> dataset;
  int64_t tokensPerSample = 0;  // 0 when tokens do not apply
  std::vector<std::string> inputNames{"input"};  // the graph's data inputs
  std::function<void(bool)> setTraining;         // train / eval mode of the model (BatchNorm, dropout)
  bool targetsAreInputs = false;                 // model.loss: none: forward(input, targets) returns the loss
  std::vector<std::string> transientBuffers;     // read by the model, not its state: not exported
  c10::Device device = c10::Device(c10::kCPU);   // where the module lives (toDevice)
  // training.precision: the autocast dtype the forward is captured under
  // (float: none). Note [bf16 by capture]: the tracer sits below autocast in
  // the dispatcher, so a forward traced under autocast records autocast's
  // casts as graph nodes (aten::to into bfloat16 before each matrix product,
  // back to float32 for the ops autocast keeps in float32). The graph then
  // runs as it is, autocast off, everywhere it runs: stages, profiler,
  // recompute, evaluation. Its saved tensors are the bfloat16 ones the
  // profile measures, parameters stay float32 (the casts' backward returns
  // float32 gradients: AdamW and DistAdam update float32 masters), and
  // every layout runs the same ops, so layouts stay exact as in float32.
  // fp16 is captured the same way (CUDA autocast into float16); its
  // gradients are loss-scaled (Note [fp16 loss scaling], optim/LossScaler.h).
  c10::ScalarType computeType = c10::kFloat;
  CaptureOptions captureOptions;  // model.fuse_attention

  // Moves the module's parameters and buffers to `device`; capture() then
  // traces there (a traced graph fixes the device of the tensors it makes).
  void toDevice(const c10::Device& where);

  // The graph's data inputs for a batch: {input}, or {input, target}.
  std::vector<torch::Tensor> dataInputs(const data::Batch& batch) const;

  // Captures the model at the micro-batch shape (training mode).
  OpGraph capture(int64_t microBatchSize) const;
  // The same in eval mode (BatchNorm reads its running statistics, dropout
  // is off), for evaluation; the model is left in training mode.
  OpGraph captureEval(int64_t microBatchSize) const;
  // Parameters/buffers by module path, in the order given.
  std::vector<torch::Tensor> tensorsByName(const std::vector<std::string>& names) const;
};

// A built-in torch::nn module (a ModuleHolder) whose forward takes the one data input.
template <class Holder>
void setModule(ModelSetup& s, Holder module) {
  s.module = module.ptr();
  s.forward = [module](const std::vector<torch::Tensor>& in) mutable { return module->forward(in.at(0)); };
}

}  // namespace sluice
