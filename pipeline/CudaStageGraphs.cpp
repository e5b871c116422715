// CUDA graphs of a stage's micro-batch work (CUDA builds; Note [graphed
// stages], pipeline/StageGraphs.h).
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/Error.h"
#include "pipeline/StageGraphs.h"

namespace sluice::pipeline {
namespace {

// What one slot captured for one input signature.
struct Captured {
  std::vector<at::Tensor> inputs;       // static inputs (leaves where they need gradients)
  std::vector<at::Tensor> outputs;      // static outputs
  at::Tensor loss;                      // the last stage's
  std::vector<at::Tensor> seeds;        // the backward's: per root, its gradient (the loss scale on the last stage)
  std::vector<int> seedOfOutput;        // per output: its seed, or -1
  std::vector<at::Tensor> inputGrads;   // per input (undefined where none)
  std::vector<at::Tensor> paramGrads;   // per distinct trainable leaf (undefined where unused)
  std::vector<size_t> leafEntry;        // per distinct trainable leaf: its first entry in paramLeaves
  size_t entries = 0;                   // paramLeaves.size() at capture
  std::unique_ptr<at::cuda::CUDAGraph> forward, backward;
};

// Thread-local: only this thread's unsafe CUDA calls break a capture, not
// other threads' (the NCCL watchdog's event queries, the swap engine's).
constexpr cudaStreamCaptureMode kCaptureMode = cudaStreamCaptureModeThreadLocal;

// A capture that failed part way: the stream leaves capture mode (the graph
// is dropped). The run cannot go on after it (the generators' states stay
// in capture mode): the caller rethrows, and the job ends with the cause.
void endFailedCapture(at::cuda::CUDAGraph& graph) {
  try {
    graph.capture_end();
  } catch (...) {
  }
}

// Buffers (entries that need no gradient, e.g. BatchNorm's running
// statistics) as they were, put back after the warm-ups, which update them
// in place: eager's forwards update them once per micro-batch, and so do replays.
class BufferSnapshot {
 public:
  explicit BufferSnapshot(const std::vector<at::Tensor>& entries) {
    torch::NoGradGuard noGrad;
    for (const auto& t : entries) {
      if (!t.requires_grad()) saved_.emplace_back(t, t.clone());
    }
  }
  void restore() {
    torch::NoGradGuard noGrad;
    for (auto& [buffer, copy] : saved_) buffer.copy_(copy);
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

std::string signatureOf(const std::vector<at::Tensor>& inputs) {
  std::ostringstream os;
  for (const auto& t : inputs) os << c10::toString(t.scalar_type()) << t.sizes() << (t.requires_grad() ? "g" : "") << ";";
  return os.str();
}

// During a forward's capture: the default generator draws from the random
// node's own state (a generator cannot be reseeded while it is captured).
class SwapInNodeGenerators final : public RandomNodeHook {
 public:
  SwapInNodeGenerators(at::Generator defaultGenerator, const std::vector<int>& nodes,
                       const std::vector<at::Generator>& generators)
      : default_(std::move(defaultGenerator)), generators_(generators) {
    for (size_t k = 0; k < nodes.size(); ++k) index_[nodes[k]] = k;
  }
  void beforeRandomNode(int64_t node) override {
    auto it = index_.find(node);
    SLUICE_CHECK(it != index_.end(), GraphError,
                 "CUDA graph capture: random node " << node << " has no generator of its own (internal error)");
    std::lock_guard<std::mutex> lock(default_.mutex());
    default_.graphsafe_set_state(generators_[it->second]);
  }

 private:
  at::Generator default_;
  const std::vector<at::Generator>& generators_;
  std::unordered_map<int64_t, size_t> index_;
};

void restoreState(at::Generator& generator, const at::Generator& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.graphsafe_set_state(state);
}

class CudaStageGraphs final : public StageGraphs {
 public:
  CudaStageGraphs(const c10::Device& device, std::string name, std::vector<int> randomNodes,
                  std::vector<bool> outputNeedsGrad)
      : device_(device), name_(std::move(name)), randomNodes_(std::move(randomNodes)),
        outputNeedsGrad_(std::move(outputNeedsGrad)), side_(c10::cuda::getStreamFromPool(false, device.index())) {
    for (size_t k = 0; k < randomNodes_.size(); ++k) generators_.push_back(at::cuda::detail::createCUDAGenerator(device.index()));
  }

  GraphedForward forward(int slot, const std::vector<at::Tensor>& inputs, const RandomKey& key,
                         const std::vector<at::Tensor>& paramLeaves, const StageForwardFn& run) override {
    auto& slotGraphs = captured_[{slot, signatureOf(inputs)}];
    if (!slotGraphs) slotGraphs = capture(inputs, key, paramLeaves, run);
    Captured& c = *slotGraphs;
    {
      torch::NoGradGuard noGrad;
      for (size_t i = 0; i < inputs.size(); ++i) c.inputs[i].copy_(inputs[i]);
    }
    for (size_t k = 0; k < generators_.size(); ++k) {
      std::lock_guard<std::mutex> lock(generators_[k].mutex());
      generators_[k].set_current_seed(streamSeed(key, randomNodes_[k]));  // Philox key, offset 0: as eager
    }
    c.forward->replay();
    current_[slot] = &c;
    GraphedForward out;
    for (const auto& o : c.outputs) out.outputs.push_back(o.detach().clone());
    if (c.loss.defined()) out.loss = c.loss.detach().clone();
    return out;
  }

  std::vector<at::Tensor> backward(int slot, const std::vector<at::Tensor>& outputGrads, double lossScale) override {
    Captured& c = slotGraphs(slot);
    torch::NoGradGuard noGrad;
    if (c.loss.defined()) {
      if (!c.seeds.empty()) c.seeds[0].fill_(lossScale);
    } else {
      for (size_t i = 0; i < c.seedOfOutput.size(); ++i) {
        const int s = c.seedOfOutput[i];
        if (s < 0) continue;
        if (i < outputGrads.size() && outputGrads[i].defined()) {
          c.seeds[s].copy_(outputGrads[i]);
        } else {
          c.seeds[s].zero_();
        }
      }
    }
    if (c.backward) c.backward->replay();
    std::vector<at::Tensor> grads;
    for (const auto& g : c.inputGrads) grads.push_back(g.defined() ? g.clone() : at::Tensor());
    return grads;
  }

  void accumulateWeights(int slot, const std::vector<at::Tensor>& paramLeaves) override {
    Captured& c = slotGraphs(slot);
    SLUICE_CHECK(paramLeaves.size() == c.entries, GraphError,
                 name_ << ": " << paramLeaves.size() << " parameter entries, but the graphs were captured with "
                       << c.entries << " (internal error)");
    torch::NoGradGuard noGrad;
    for (size_t j = 0; j < c.paramGrads.size(); ++j) {
      if (!c.paramGrads[j].defined()) continue;  // not reached: eager leaves its .grad alone too
      auto leaf = paramLeaves.at(c.leafEntry[j]);
      auto& grad = leaf.mutable_grad();
      if (grad.defined()) {
        grad.add_(c.paramGrads[j]);
      } else if (leaf.is_non_overlapping_and_dense()) {  // the parameter's strides, as AccumulateGrad gives
        grad = at::empty_strided(leaf.sizes(), leaf.strides(), c.paramGrads[j].options()).copy_(c.paramGrads[j]);
      } else {
        grad = c.paramGrads[j].clone(at::MemoryFormat::Contiguous);
      }
    }
  }

  int graphsCaptured() const override { return captures_; }

 private:
  Captured& slotGraphs(int slot) {
    auto it = current_.find(slot);
    SLUICE_CHECK(it != current_.end(), GraphError, name_ << ": graph slot " << slot << " has run no forward");
    return *it->second;
  }
  std::unique_ptr<Captured> capture(const std::vector<at::Tensor>& inputs, const RandomKey& key,
                                    const std::vector<at::Tensor>& paramLeaves, const StageForwardFn& run);
  void captureBackward(Captured& c, const std::vector<at::Tensor>& leaves);

  c10::Device device_;
  std::string name_;
  std::vector<int> randomNodes_;
  std::vector<bool> outputNeedsGrad_;
  c10::cuda::CUDAStream side_;
  std::vector<at::Generator> generators_;  // one per random node
  std::map<std::pair<int, std::string>, std::unique_ptr<Captured>> captured_;
  std::map<int, Captured*> current_;  // per slot: what its micro-batch ran
  int captures_ = 0;
};

// The backward's roots (the loss, or the outputs the next stage sends
// gradients for) with their static seeds, and what it differentiates for:
// the inputs that need gradients, then the distinct trainable leaves.
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> backwardRoots(Captured& c,
                                                                         const std::vector<bool>& outputNeedsGrad) {
  std::vector<at::Tensor> roots;
  c.seeds.clear();
  c.seedOfOutput.assign(c.outputs.size(), -1);
  if (c.loss.defined()) {
    roots.push_back(c.loss);
    c.seeds.push_back(at::ones_like(c.loss));
  } else {
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      if (i >= outputNeedsGrad.size() || !outputNeedsGrad[i] || !c.outputs[i].requires_grad()) continue;
      c.seedOfOutput[i] = static_cast<int>(roots.size());
      roots.push_back(c.outputs[i]);
      c.seeds.push_back(at::zeros_like(c.outputs[i]));
    }
  }
  return {roots, c.seeds};
}

std::vector<at::Tensor> gradientTargets(const Captured& c, const std::vector<at::Tensor>& leaves) {
  std::vector<at::Tensor> targets;
  for (const auto& t : c.inputs) {
    if (t.requires_grad()) targets.push_back(t);
  }
  targets.insert(targets.end(), leaves.begin(), leaves.end());
  return targets;
}

void CudaStageGraphs::captureBackward(Captured& c, const std::vector<at::Tensor>& leaves) {
  auto [roots, seeds] = backwardRoots(c, outputNeedsGrad_);
  const auto targets = gradientTargets(c, leaves);
  c.inputGrads.assign(c.inputs.size(), at::Tensor());
  c.paramGrads.assign(leaves.size(), at::Tensor());
  if (roots.empty() || targets.empty()) return;
  c.backward = std::make_unique<at::cuda::CUDAGraph>();
  c.backward->capture_begin(c.forward->pool(), kCaptureMode);
  std::vector<at::Tensor> grads;
  try {
    grads = torch::autograd::grad(roots, targets, seeds, /*retain_graph=*/true, /*create_graph=*/false,
                                  /*allow_unused=*/true);
  } catch (...) {
    endFailedCapture(*c.backward);
    throw;
  }
  c.backward->capture_end();
  ++captures_;
  size_t k = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].requires_grad()) c.inputGrads[i] = grads[k++];
  }
  for (size_t j = 0; j < leaves.size(); ++j) c.paramGrads[j] = grads[k++];
}

std::unique_ptr<Captured> CudaStageGraphs::capture(const std::vector<at::Tensor>& inputs, const RandomKey& key,
                                                   const std::vector<at::Tensor>& paramLeaves,
                                                   const StageForwardFn& run) {
  auto c = std::make_unique<Captured>();
  for (const auto& t : inputs) c->inputs.push_back(t.detach().clone().requires_grad_(t.requires_grad()));
  c->entries = paramLeaves.size();
  std::vector<at::Tensor> leaves;  // the distinct trainable ones (an entry may repeat a tensor)
  std::map<const c10::TensorImpl*, size_t> seen;
  for (size_t i = 0; i < paramLeaves.size(); ++i) {
    if (!paramLeaves[i].requires_grad() || !seen.emplace(paramLeaves[i].unsafeGetTensorImpl(), leaves.size()).second) continue;
    leaves.push_back(paramLeaves[i]);
    c->leafEntry.push_back(i);
  }
  // The side stream starts after what the compute stream queued (the inputs' copies, the last update).
  auto compute = c10::cuda::getCurrentCUDAStream(device_.index());
  at::cuda::CUDAEvent ready;
  ready.record(compute);
  ready.block(side_);
  {
    c10::cuda::CUDAStreamGuard onSide(side_);
    BufferSnapshot buffers(paramLeaves);
    for (int w = 0; w < kWarmups; ++w) {  // libraries' lazy set-up (workspaces, handles) before capture
      RandomKeyScope scope(key, device_);
      Captured warm;
      auto f = run(c->inputs);
      warm.inputs = c->inputs;
      warm.outputs = f.outputs;
      warm.loss = f.loss;
      auto [roots, seeds] = backwardRoots(warm, outputNeedsGrad_);
      const auto targets = gradientTargets(warm, leaves);
      if (!roots.empty() && !targets.empty()) torch::autograd::grad(roots, targets, seeds, false, false, true);
    }
    buffers.restore();
    c->forward = std::make_unique<at::cuda::CUDAGraph>();
    for (const auto& g : generators_) c->forward->register_generator_state(g);
    auto defaultGenerator = at::cuda::detail::getDefaultCUDAGenerator(device_.index());
    const auto ownState = defaultGenerator.graphsafe_get_state();
    c->forward->capture_begin({0, 0}, kCaptureMode);
    try {
      SwapInNodeGenerators hook(defaultGenerator, randomNodes_, generators_);
      RandomKeyScope scope(key, device_, &hook);
      auto f = run(c->inputs);
      c->outputs = std::move(f.outputs);
      c->loss = f.loss;
    } catch (...) {
      restoreState(defaultGenerator, ownState);
      endFailedCapture(*c->forward);
      throw;
    }
    restoreState(defaultGenerator, ownState);  // before capture_end, which may throw
    c->forward->capture_end();
    ++captures_;
    captureBackward(*c, leaves);
  }
  // The compute stream goes on after the side stream's work (the warm-ups).
  at::cuda::CUDAEvent done;
  done.record(side_);
  done.block(compute);
  return c;
}

}  // namespace

std::unique_ptr<StageGraphs> makeStageGraphs(const c10::Device& device, const std::string& stageName,
                                             std::vector<int> randomNodes, std::vector<bool> outputNeedsGrad) {
  SLUICE_CHECK(device.is_cuda(), GraphError,
               stageName << ": pipeline.execution: graphs captures CUDA graphs, but the stage runs on " << device
                         << "; use job.device: cuda, or pipeline.execution: eager");
  return std::make_unique<CudaStageGraphs>(device, stageName, std::move(randomNodes), std::move(outputNeedsGrad));
}

}  // namespace sluice::pipeline
