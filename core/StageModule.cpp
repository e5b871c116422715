#include "core/StageModule.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <chrono>
#include <sstream>

#include "core/Error.h"
#include "core/Log.h"
#include "core/NodeProgram.h"
#include "core/RandomStream.h"

namespace sluice {

struct StageModule::Compiled {
  std::unique_ptr<torch::jit::GraphFunction> function;  // compiled mode; eager mode shares program_
};

namespace {

std::string signatureOf(const std::vector<torch::Tensor>& inputs) {
  std::ostringstream os;
  for (auto& t : inputs) {
    os << c10::toString(t.scalar_type()) << t.sizes() << t.device() << (t.requires_grad() ? "g" : "") << ";";
  }
  return os.str();
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StageModule::StageModule(std::shared_ptr<torch::jit::Graph> graph, std::string name, ExecMode mode,
                         std::vector<std::string> inputNames, std::vector<int> streamIds)
    : graph_(std::move(graph)), name_(std::move(name)), mode_(mode), inputNames_(std::move(inputNames)),
      streamIds_(std::move(streamIds)) {
  if (mode_ != ExecMode::Compiled || streamIds_.empty()) return;
  for (auto* node : graph_->nodes()) {
    SLUICE_CHECK(!drawsRandom(node), GraphError,
                 name_ << ": " << node->kind().toQualString() << " (output %" << node->output(0)->debugName()
                       << ") draws random numbers, and pipeline.execution: compiled runs the stage as one TorchScript "
                          "function, which cannot key each random node's numbers to the step, micro-batch and node "
                          "(Note [random streams]): use pipeline.execution: eager, or turn the model's dropout off");
  }
}

StageModule::~StageModule() = default;
StageModule::StageModule(StageModule&&) noexcept = default;
StageModule& StageModule::operator=(StageModule&&) noexcept = default;

const NodeProgram& StageModule::program() {
  if (!program_) program_ = std::make_unique<NodeProgram>(graph_, streamIds_);
  return *program_;
}

std::vector<torch::Tensor> StageModule::forward(const std::vector<torch::Tensor>& inputs, NodeObserver* observer) {
  SLUICE_CHECK(inputs.size() == graph_->inputs().size(), GraphError,
               name_ << " expects " << graph_->inputs().size() << " inputs, got " << inputs.size());
  SLUICE_CHECK(!observer || mode_ == ExecMode::Eager, GraphError,
               name_ << ": a memory plan (swap, recompute) or memory measurement needs pipeline.execution: eager");
  auto t0 = std::chrono::steady_clock::now();
  std::string sig = signatureOf(inputs);
  auto it = cache_.find(sig);
  bool firstCall = it == cache_.end();
  if (firstCall) {
    auto compiled = std::make_unique<Compiled>();
    if (mode_ == ExecMode::Compiled) {
      compiled->function = std::make_unique<torch::jit::GraphFunction>(name_, graph_->copy(), nullptr);
    } else {
      program();
    }
    std::vector<std::vector<int64_t>> shapes;
    for (auto& t : inputs) shapes.push_back(t.sizes().vec());
    ++metrics_.compiles;
    if (metrics_.compiles > 1) {
      std::string cause = "input signature changed";
      for (size_t i = 0; i < shapes.size() && i < lastShapes_.size(); ++i) {
        if (shapes[i] != lastShapes_[i]) {
          std::string nm = i < inputNames_.size() ? inputNames_[i] : "#" + std::to_string(i);
          cause = "input '" + nm + "' changed shape to " + c10::str(inputs[i].sizes());
          break;
        }
      }
      metrics_.recompileCauses.push_back(cause);
      if (metrics_.compiles > kRecompileWarnAfter) {
        log::warn(name_ + " recompiled " + std::to_string(metrics_.compiles) + " times; " + cause +
                  ". Pad or bucket shapes to avoid recompiles.");
      }
    }
    lastShapes_ = std::move(shapes);
    it = cache_.emplace(sig, std::move(compiled)).first;
  } else {
    ++metrics_.cacheHits;
  }
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  if (mode_ == ExecMode::Compiled) {
    it->second->function->run(stack);
  } else {
    stack = program_->run(std::move(stack), observer);
  }
  std::vector<torch::Tensor> outputs;
  outputs.reserve(stack.size());
  if (stack.size() == 1 && stack[0].isTuple()) {
    auto elements = stack[0].toTupleRef().elements().vec();
    stack = torch::jit::Stack(elements.begin(), elements.end());
  }
  for (auto& v : stack) {
    SLUICE_CHECK(v.isTensor(), GraphError, name_ << " returned a non-tensor output (" << v.tagKind() << ")");
    outputs.push_back(v.toTensor());
  }
  (firstCall ? metrics_.compileSeconds : metrics_.executeSeconds) += secondsSince(t0);
  return outputs;
}

}  // namespace sluice
