#include "core/Capture.h"

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "core/AttentionFusion.h"
#include "core/Error.h"

namespace sluice {

std::vector<torch::Tensor> tensorsByName(torch::nn::Module& module, const std::vector<std::string>& names) {
  auto params = module.named_parameters(/*recurse=*/true);
  auto buffers = module.named_buffers(/*recurse=*/true);
  std::vector<torch::Tensor> out;
  for (auto& n : names) {
    if (auto* p = params.find(n)) {
      out.push_back(*p);
    } else if (auto* b = buffers.find(n)) {
      out.push_back(*b);
    } else {
      throw GraphError("the model has no parameter or buffer named '" + n + "'");
    }
  }
  return out;
}

std::vector<torch::Tensor> graphInputs(const OpGraph& graph, torch::nn::Module& module,
                                       const std::vector<torch::Tensor>& data) {
  std::vector<std::string> names;
  for (auto& in : graph.inputs()) {
    if (in.kind != InputKind::Data) names.push_back(in.name);
  }
  SLUICE_CHECK(graph.inputs().size() - names.size() == data.size(), GraphError,
               "the graph has " << graph.inputs().size() - names.size() << " data inputs, got " << data.size()
                                << " tensors");
  auto named = tensorsByName(module, names);
  std::vector<torch::Tensor> out;
  size_t d = 0, p = 0;
  for (auto& in : graph.inputs()) out.push_back(in.kind == InputKind::Data ? data[d++] : named[p++]);
  return out;
}

KeepBuffers::KeepBuffers(torch::nn::Module& module) {
  for (auto& b : module.named_buffers(/*recurse=*/true)) saved_.emplace_back(b.value(), b.value().clone());
}

KeepBuffers::KeepBuffers(const std::vector<torch::Tensor>& buffers) {
  for (auto& b : buffers) saved_.emplace_back(b, b.clone());
}

KeepBuffers::~KeepBuffers() {
  at::AutoDispatchBelowADInplaceOrView silent;  // no version bump, as a kernel's own buffer update
  for (auto& [buffer, value] : saved_) buffer.copy_(value);
}

OpGraph capture(torch::nn::Module& module, const ForwardFn& forward, const std::vector<NamedTensor>& dataInputs,
                const CaptureOptions& options) {
  std::vector<GraphInput> inputs;
  torch::jit::Stack stack;
  for (auto& d : dataInputs) {
    stack.emplace_back(d.tensor);
    inputs.push_back({d.name, InputKind::Data, {}});
  }
  for (auto& p : module.named_parameters(/*recurse=*/true)) {
    stack.emplace_back(p.value());
    inputs.push_back({p.key(), InputKind::Parameter, {}});
  }
  for (auto& b : module.named_buffers(/*recurse=*/true)) {
    stack.emplace_back(b.value());
    inputs.push_back({b.key(), InputKind::Buffer, {}});
  }
  const size_t numData = dataInputs.size();
  // The tracer maps each input tensor (by identity) to a graph input; the
  // module's forward reads its own parameter tensors, which are those same
  // tensors, so every weight read becomes a read of a named graph input.
  auto traced = [&](torch::jit::Stack in) -> torch::jit::Stack {
    std::vector<torch::Tensor> data;
    for (size_t i = 0; i < numData; ++i) data.push_back(in[i].toTensor());
    return {forward(data)};
  };
  KeepBuffers keep(module);  // tracing runs forward once
  std::shared_ptr<torch::jit::Graph> graph;
  try {
    auto result = torch::jit::tracer::trace(
        stack, traced, [](const torch::autograd::Variable&) { return std::string(); }, /*strict=*/true,
        /*force_outplace=*/false);
    graph = result.first->graph;
  } catch (const std::exception& e) {
    throw GraphError(std::string("tracing the model failed: ") + e.what());
  }
  const int fused = options.fuseAttention ? fuseCausalAttention(*graph, stack) : 0;
  torch::jit::EliminateDeadCode(graph);
  if (fused > 0) {
    // The rewrite leaves gaps in the values' numbering and its constants
    // numbered last; parsing the IR numbers them in order, as a graph loaded
    // from a file (fromProtoBytes) is, so the two hash the same.
    auto renumbered = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(graph->toString(), renumbered.get());
    graph = renumbered;
  }
  OpGraph captured(graph, inputs);
  captured.setFusedAttentions(fused);
  return captured;
}

}  // namespace sluice
