// From a Config to the pieces a job needs: the model (built from job.seed, so
// every rank holds identical initial weights), its forward for capture, its
// loss, and its dataset.
#pragma once

#include <functional>
#include <memory>

#include "core/Capture.h"
#include "core/OpGraph.h"
#include "config/Config.h"
#include "data/Dataset.h"
#include "pipeline/StageWorker.h"

namespace sluice {

struct ModelSetup {
  std::shared_ptr<torch::nn::Module> module;
  ForwardFn forward;
  pipeline::LossFn loss;
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

// Builds the model (after checkModelFitsMemory), its forward, loss and data.
ModelSetup makeModelSetup(const Config& config);
// Estimates from the config alone what one rank holds before the model is
// split (parameters with gradients and Adam state, buffers, one micro-batch of
// activations) and throws ConfigError naming the keys and the bytes when
// ranksHere such ranks exceed the machine's memory: before anything is
// allocated. makeModelSetup checks with Open MPI's local rank count.
void checkModelFitsMemory(const Config& config, int ranksHere = 1);

}  // namespace sluice
