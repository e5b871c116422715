// core::capture: a model's forward traced into an OpGraph (core/OpGraph.h).
//
// capture() runs LibTorch's tracer over a module's forward with the data
// inputs, the parameters and the buffers all passed as graph inputs (named by
// module path), then (CaptureOptions) rewrites causal attention. Not
// thread-safe: the tracer is a global while it runs.
//
//   auto graph = capture(*gpt, [&](const std::vector<torch::Tensor>& in) { return gpt->forward(in[0]); },
//                        {{"tokens", tokens}});
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/OpGraph.h"

namespace sluice {

// A data input of the traced function: a name and an example tensor.
struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

using ForwardFn = std::function<torch::Tensor(const std::vector<torch::Tensor>& dataInputs)>;

// Saves the module's buffers (or the given tensors) and puts their values
// back when it goes out of scope, below autograd's in-place tracking (their
// version counters stay, as when a kernel updates its own buffers): running
// forward outside training (capture, profiling, a recompute replay) must not
// update BatchNorm's running statistics or batch counter.
class KeepBuffers {
 public:
  explicit KeepBuffers(torch::nn::Module& module);
  explicit KeepBuffers(const std::vector<torch::Tensor>& buffers);
  ~KeepBuffers();
  KeepBuffers(const KeepBuffers&) = delete;
  KeepBuffers& operator=(const KeepBuffers&) = delete;

 private:
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved_;
};

struct CaptureOptions {
  // Rewrite causal attention written op by op into scaled_dot_product_attention
  // (Note [attention fusion], core/AttentionFusion.h); model.fuse_attention.
  bool fuseAttention = true;
};

// Traces forward(dataInputs) on module; parameters and buffers become named
// graph inputs. Buffers keep their values (KeepBuffers).
OpGraph capture(torch::nn::Module& module, const ForwardFn& forward, const std::vector<NamedTensor>& dataInputs,
                const CaptureOptions& options = {});

// The module's parameters/buffers with these module paths (the names capture()
// gives graph inputs), in the order given. Throws GraphError for an unknown name.
std::vector<torch::Tensor> tensorsByName(torch::nn::Module& module, const std::vector<std::string>& names);

// One tensor per graph input, in graph input order: the data inputs from
// `data` (in order), parameters and buffers from `module` by name. Throws
// GraphError when the number of data tensors differs from the graph's.
std::vector<torch::Tensor> graphInputs(const OpGraph& graph, torch::nn::Module& module,
                                       const std::vector<torch::Tensor>& data);

}  // namespace sluice
