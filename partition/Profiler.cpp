// profileGraph(): see Profile.h.
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/Tensors.h"
#include "core/Device.h"
#include "core/Error.h"
#include "core/RandomStream.h"
#include "core/GraphSplit.h"
#include "core/Log.h"
#include "core/NodeProgram.h"
#include "memory/CountingAllocator.h"
#include "memory/DeviceMemory.h"
#include "memory/SavedTensorHooks.h"
#include "memory/StageMemory.h"
#include "partition/ContextTiming.h"
#include "partition/Profile.h"
#include "partition/Profiler.h"
#include "partition/Timing.h"

namespace sluice::partition {
namespace {

using torch::jit::IValue;

// torch::autograd::grad for one node's backward; an error names the node
// and where its tensors live (autograd's own messages name neither).
std::vector<torch::Tensor> nodeGrad(const OpGraph& g, int node, const std::vector<torch::Tensor>& roots,
                                    const std::vector<torch::Tensor>& leaves, const std::vector<torch::Tensor>& grads,
                                    bool retain) {
  try {
    return torch::autograd::grad(roots, leaves, grads, retain, /*create_graph=*/false, /*allow_unused=*/true);
  } catch (const c10::Error& e) {
    std::ostringstream where;
    auto devices = [&](const char* what, const std::vector<torch::Tensor>& ts) {
      where << " " << what << ":";
      for (auto& t : ts) where << " " << (t.defined() ? t.device().str() : std::string("undefined"));
    };
    devices("outputs", roots);
    devices("output gradients", grads);
    devices("inputs", leaves);
    throw GraphError("profile: the backward of node " + std::to_string(node) + " (" + g.nodes()[node].op +
                     ") failed;" + where.str() + "; " + e.what_without_backtrace());
  }
}

std::string formatMs(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << s * 1e3 << " ms";
  return o.str();
}

// The device profiled (the graph's inputs'): memory is counted there (CUDA's
// caching allocator on a GPU, memory/DeviceMemory.h).
thread_local c10::Device profiled(c10::kCPU);
c10::Device deviceOf(const std::vector<torch::Tensor>& tensors) {
  for (auto& t : tensors) {
    if (t.defined() && !t.is_cpu()) return t.device();
  }
  return c10::Device(c10::kCPU);
}

int64_t allocated() { return memory::deviceAllocatorStats(profiled).currentBytes; }

// A timestamp after the device has finished what was enqueued (no-op on CPU).
Clock::time_point now() {
  synchronize(profiled);
  return Clock::now();
}

// Around StageMemory: for each node, the most its forward held beyond the
// saved storages (temporaries, values waiting for their reader, outputs);
// and the most it allocated itself (beyond what was allocated when it
// started: its outputs and temporaries), what re-running it costs.
class WorkspaceObserver : public NodeObserver {
 public:
  WorkspaceObserver(memory::StageMemory& memory, const std::vector<int>& nodeIndex, int64_t base)
      : memory_(memory), nodeIndex_(nodeIndex), base_(base) {}
  void beforeNode(int pos, const std::vector<IValue>& inputs) override {
    memory_.beforeNode(pos, inputs);
    memory::resetDevicePeak(profiled);
    start_ = allocated();
  }
  void afterNode(int pos, const std::vector<IValue>& inputs, const std::vector<IValue>& outputs) override {
    memory_.afterNode(pos, inputs, outputs);
    const int node = nodeIndex_[pos];
    if (node < 0) return;
    int64_t saved = 0;
    for (auto& f : memory_.facts().storages) {
      if (!f.savers.empty()) saved += f.bytes;
    }
    const int64_t peak = memory::deviceAllocatorStats(profiled).peakBytes;
    if (workspace.size() <= static_cast<size_t>(node)) workspace.resize(node + 1, 0), own.resize(node + 1, 0);
    workspace[node] = std::max<int64_t>(0, peak - base_ - saved);
    own[node] = std::max<int64_t>(0, peak - start_);
  }
  std::vector<int64_t> workspace, own;

 private:
  memory::StageMemory& memory_;
  const std::vector<int>& nodeIndex_;
  int64_t base_, start_ = 0;
};

// One forward of the whole graph as a one-stage job runs it: the memory facts
// and each node's forward workspace.
void profileMemory(const OpGraph& g, const std::vector<torch::Tensor>& inputs, Profile& profile,
                   std::vector<int64_t>& forwardWorkspace) {
  auto whole = splitGraph(g, {}).at(0);
  std::unordered_map<std::string, torch::Tensor> byName;
  std::vector<torch::Tensor> data;
  for (size_t i = 0; i < inputs.size(); ++i) {
    byName[g.inputs()[i].name] = inputs[i];
    if (g.inputs()[i].kind == InputKind::Data) data.push_back(inputs[i]);
  }
  std::vector<torch::Tensor> params;
  for (auto& name : whole.paramInputs) params.push_back(byName.at(name));
  NodeProgram program(whole.graph);
  memory::StageMemoryOptions options;
  options.recordFacts = true;
  options.stageName = "profile";
  memory::StageMemory memory(program, whole.nodeIndex, params, options);
  std::vector<IValue> stack(data.begin(), data.end());
  stack.insert(stack.end(), params.begin(), params.end());
  {
    const int64_t base = allocated();
    WorkspaceObserver observer(memory, whole.nodeIndex, base);
    memory.beginForward(0, data);
    memory::SavedTensorScope scope(memory.hooks());
    auto out = program.run(stack, &observer);
    memory.endForward();
    forwardWorkspace = observer.workspace;
    for (size_t i = 0; i < observer.own.size() && i < profile.nodes.size(); ++i) {
      profile.nodes[i].forwardWorkspaceBytes = observer.own[i];
    }
  }
  profile.facts = memory.facts();
  profile.facts.outputs.resize(g.numNodes());
  profile.facts.writesParameter.resize(g.numNodes(), 0);
}

// Each node's op, randomness, recomputability, parameter bytes (a shared
// parameter on its first reader) and saved bytes.
void describeNodes(const OpGraph& g, Profile& profile) {
  std::unordered_set<std::string> paramsSeen;
  for (auto& n : g.nodes()) {
    auto& p = profile.nodes[n.index];
    p.index = n.index;
    p.op = n.op;
    p.random = isRandomOp(n.op);
    p.recomputable = !profile.facts.writesParameter[n.index];
    for (auto& name : n.params) {
      if (!paramsSeen.insert(name).second) continue;
      for (size_t i = 0; i < g.inputs().size(); ++i) {
        if (g.inputs()[i].name == name) p.paramBytes += g.inputs()[i].value.bytes();
      }
    }
  }
  for (auto& f : profile.facts.storages) {
    if (!f.savers.empty()) profile.nodes.at(f.key.node).savedBytes += f.bytes;
  }
}

std::unordered_set<const torch::jit::Value*> valuesFromParams(const OpGraph& g) {
  // Values computed from parameters alone (a weight, its transpose, a view
  // of it): their gradients are weight work wherever they are consumed.
  auto& graph = *g.graph();
  std::unordered_set<const torch::jit::Value*> fromParams;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    if (g.inputs()[i].kind == InputKind::Parameter) fromParams.insert(graph.inputs()[i]);
  }
  for (auto* node : graph.nodes()) {
    bool any = false, all = true;
    for (auto* in : node->inputs()) {
      if (!in->type()->cast<c10::TensorType>() || in->node()->kind() == c10::prim::Constant) continue;
      if (fromParams.count(in)) {
        any = true;
      } else {
        all = false;
      }
    }
    if (any && all) {
      for (auto* out : node->outputs()) fromParams.insert(out);
    }
  }
  return fromParams;
}

// The times training will see (ContextTiming.h) replace the isolated ones;
// the isolated pass still gives each node's weight share.
void timeNodesInContext(const OpGraph& g, const std::vector<torch::Tensor>& inputs, const ProfileOptions& options,
                        Profile& profile) {
  std::vector<int64_t> paramBytes(g.numNodes());
  for (int i = 0; i < g.numNodes(); ++i) paramBytes[i] = profile.nodes[i].paramBytes;
  const double isolatedForward = profile.totalForward(), isolatedBackward = profile.totalBackward();
  if (options.startTogether) options.startTogether();
  auto context = timeInContext(g, inputs, paramBytes, options.warmup, options.iterations, options.loss);
  for (int i = 0; i < g.numNodes(); ++i) {
    profile.nodes[i].forwardSeconds = context.forwardSeconds[i];
    profile.nodes[i].backwardSeconds = context.backwardSeconds[i];
  }
  if (options.loss) {
    profile.lossForwardSeconds = context.lossForwardSeconds;
    profile.lossBackwardSeconds = context.lossBackwardSeconds;
  }
  log::info("profile: forward " + formatMs(context.forwardWall) + " and backward " + formatMs(context.backwardWall) +
            " in context; timed node by node alone they sum to " + formatMs(isolatedForward) + " and " +
            formatMs(isolatedBackward));
}

// A node's inputs for timing it alone: detached copies, leaves where a
// gradient flows (and whether each leaf is made from parameters alone).
struct IsolatedInputs {
  torch::jit::Stack stack;
  std::vector<torch::Tensor> leaves;
  std::vector<char> leafIsParam;
};

IsolatedInputs isolatedInputs(const OpGraph& g, const torch::jit::Node* node, bool indexed, bool inPlace,
                              const std::unordered_map<const torch::jit::Value*, IValue>& env,
                              const std::unordered_set<const torch::jit::Value*>& fromParams) {
  IsolatedInputs out;
  for (auto* in : node->inputs()) {
    IValue v = env.at(in);
    if (indexed && v.isTensor()) {
      auto t = v.toTensor().detach();
      const bool grad = t.is_floating_point() && g.value(in->debugName()).requiresGrad;
      if (grad) {
        t.requires_grad_(true);
        out.leaves.push_back(t);
        out.leafIsParam.push_back(fromParams.count(in) > 0);
      }
      // An in-place op may not write into a leaf: give it a (non-leaf) copy, made before timing.
      v = (inPlace && grad) ? IValue(t.clone()) : IValue(t);
    }
    out.stack.push_back(std::move(v));
  }
  return out;
}

// A node's backward, timed alone on its isolated inputs. On the last run a
// node with both input and weight gradients is timed in its two halves
// (BackwardSplit's input then weight part) for its weight share; the first
// run also measures its backward workspace.
double timeBackward(const OpGraph& g, int node, IsolatedInputs& in, std::vector<torch::Tensor>& roots,
                    std::vector<torch::Tensor>& grads, bool first, bool last, int64_t before, int64_t& workspace,
                    double& weightShare) {
  double backward = 0;
  const auto params = std::count(in.leafIsParam.begin(), in.leafIsParam.end(), 1);
  const bool mixed = params > 0 && params < static_cast<long>(in.leaves.size());
  if (!roots.empty() && !in.leaves.empty() && last && !first && mixed) {
    // Once per node: the input-gradient half, then the weight half (Note: BackwardSplit), for the weight share.
    std::vector<torch::Tensor> inputLeaves, paramLeaves;
    for (size_t k = 0; k < in.leaves.size(); ++k) (in.leafIsParam[k] ? paramLeaves : inputLeaves).push_back(in.leaves[k]);
    auto t2 = now();
    nodeGrad(g, node, roots, inputLeaves, grads, /*retain=*/true);
    auto t3 = now();
    nodeGrad(g, node, roots, paramLeaves, grads, /*retain=*/false);
    backward = seconds(t2, now());
    weightShare = backward > 0 ? seconds(t3, now()) / backward : 0.5;
  } else if (!roots.empty() && !in.leaves.empty()) {
    if (first) memory::resetDevicePeak(profiled);
    auto t2 = now();
    auto inputGrads = nodeGrad(g, node, roots, in.leaves, grads, /*retain=*/false);
    backward = seconds(t2, now());
    if (first) workspace = memory::deviceAllocatorStats(profiled).peakBytes - before;
    if (!mixed) weightShare = params > 0 ? 1.0 : 0.0;
  }
  return backward;
}

// Each node's median forward and backward over the timed runs, and its
// workspace (the larger of its forward's and its backward's).
void setIsolatedTimes(const std::vector<std::vector<double>>& fwd, const std::vector<std::vector<double>>& bwd,
                      const std::vector<int64_t>& forwardWorkspace, const std::vector<int64_t>& backwardWorkspace,
                      Profile& profile) {
  for (size_t i = 0; i < profile.nodes.size(); ++i) {
    profile.nodes[i].forwardSeconds = median(fwd[i]);
    profile.nodes[i].backwardSeconds = median(bwd[i]);
    profile.nodes[i].workspaceBytes = std::max(forwardWorkspace[i], backwardWorkspace[i]);
  }
}

// What the isolated runs measure, per node: the timed runs' forward and
// backward seconds, the backward's workspace and the weight share of the
// backward (0.5 where it was not measured).
struct IsolatedRuns {
  std::vector<std::vector<double>> fwd, bwd;
  std::vector<int64_t> backwardWorkspace;
  std::vector<double> weightShare;
};

// One graph node (index) timed alone: its forward on its isolated inputs
// (which leaves its outputs on their stack), then its backward
// (timeBackward); the first run also records its output bytes.
void timeNodeAlone(const OpGraph& g, const NodeProgram& program, int pos, int index, IsolatedInputs& isolated,
                   bool first, bool last, bool timed, NodeProfile& p, IsolatedRuns& runs) {
  auto& stack = isolated.stack;
  auto t0 = now();
  program.runNode(pos, stack);
  auto t1 = now();
  std::vector<torch::Tensor> outs, grads, roots;
  for (auto& v : stack) tensorsIn(v, outs);
  if (first) {
    p.outputBytes = 0;
    for (auto& t : outs) p.outputBytes += static_cast<int64_t>(t.nbytes());
  }
  const int64_t before = allocated();
  for (auto& t : outs) {
    if (t.requires_grad()) {
      roots.push_back(t);
      grads.push_back(torch::ones_like(t));
    }
  }
  const double backward = timeBackward(g, index, isolated, roots, grads, first, last, before,
                                       runs.backwardWorkspace[index], runs.weightShare[index]);
  if (timed) {
    runs.fwd[index].push_back(seconds(t0, t1));
    runs.bwd[index].push_back(backward);
  }
}

// Timing: every node alone, on detached copies of its inputs, over the
// warmup and timed runs.
IsolatedRuns timeNodesAlone(const OpGraph& g, const std::vector<torch::Tensor>& inputs, const ProfileOptions& options,
                            Profile& profile) {
  auto& graph = *g.graph();
  std::unordered_map<const torch::jit::Node*, int> indexOf;
  for (auto& n : g.nodes()) indexOf[n.irNode] = n.index;
  IsolatedRuns out;
  out.fwd.resize(g.numNodes());
  out.bwd.resize(g.numNodes());
  out.backwardWorkspace.assign(g.numNodes(), 0);
  out.weightShare.assign(g.numNodes(), 0.5);
  const auto fromParams = valuesFromParams(g);
  NodeProgram program(g.graph());
  const int runs = options.warmup + options.iterations;
  for (int run = 0; run < runs; ++run) {
    const bool first = run == 0, timed = run >= options.warmup;
    std::unordered_map<const torch::jit::Value*, IValue> env;
    for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs()[i]] = inputs[i];
    for (int pos = 0; pos < program.numNodes(); ++pos) {
      auto* node = program.node(pos);
      auto found = indexOf.find(node);
      const bool indexed = found != indexOf.end();
      const bool inPlace = indexed && !g.nodes()[found->second].op.empty() && g.nodes()[found->second].op.back() == '_';
      auto isolated = isolatedInputs(g, node, indexed, inPlace, env, fromParams);
      auto& stack = isolated.stack;
      if (!indexed) {
        program.runNode(pos, stack);
      } else {
        timeNodeAlone(g, program, pos, found->second, isolated, first, run == runs - 1, timed,
                      profile.nodes[found->second], out);
      }
      for (size_t i = 0; i < node->outputs().size(); ++i) {
        IValue v = stack.at(i);
        if (v.isTensor()) v = v.toTensor().detach();
        env[node->output(i)] = std::move(v);
      }
    }
  }
  return out;
}

}  // namespace

Profile profileGraph(const OpGraph& g, const std::vector<torch::Tensor>& inputs, const ProfileOptions& options) {
  auto& graph = *g.graph();
  SLUICE_CHECK(inputs.size() == graph.inputs().size(), GraphError,
               "profile: the graph has " << graph.inputs().size() << " inputs, got " << inputs.size());
  memory::installCountingAllocator();
  profiled = deviceOf(inputs);

  Profile profile;
  profile.graphHash = g.hash();
  profile.iterations = options.iterations;
  profile.nodes.resize(g.numNodes());
  std::vector<int64_t> forwardWorkspace;
  profileMemory(g, inputs, profile, forwardWorkspace);
  forwardWorkspace.resize(g.numNodes(), 0);
  describeNodes(g, profile);

  const auto isolated = timeNodesAlone(g, inputs, options, profile);
  setIsolatedTimes(isolated.fwd, isolated.bwd, forwardWorkspace, isolated.backwardWorkspace, profile);
  if (options.inContext) timeNodesInContext(g, inputs, options, profile);
  for (int i = 0; i < g.numNodes(); ++i) {
    profile.nodes[i].weightBackwardSeconds = isolated.weightShare[i] * profile.nodes[i].backwardSeconds;
  }
  return profile;
}

LossProfile profileLoss(const std::function<torch::Tensor(const torch::Tensor&)>& loss, const torch::Tensor& output,
                        const ProfileOptions& options) {
  memory::installCountingAllocator();
  profiled = deviceOf({output});
  LossProfile out;
  std::vector<double> fwd, bwd;
  for (int run = 0; run < options.warmup + options.iterations; ++run) {
    const bool first = run == 0;
    auto leaf = output.detach().requires_grad_(output.is_floating_point());
    memory::SavedBytesCounter counter;
    const int64_t base = allocated();
    if (first) memory::resetDevicePeak(profiled);
    auto t0 = now();
    torch::Tensor l;
    if (first) {
      memory::SavedTensorScope scope(counter.factory());
      l = loss(leaf);
    } else {
      l = loss(leaf);
    }
    auto t1 = now();
    if (leaf.requires_grad()) l.backward();
    auto t2 = now();
    if (first) {
      out.savedBytes = counter.bytes();
      // The logits stay alive through the loss's forward in training; here they existed before `base`.
      out.workspaceBytes = std::max<int64_t>(0, memory::deviceAllocatorStats(profiled).peakBytes - base - out.savedBytes) +
                           static_cast<int64_t>(output.nbytes());
    }
    if (run >= options.warmup) {
      fwd.push_back(seconds(t0, t1));
      bwd.push_back(seconds(t1, t2));
    }
  }
  out.forwardSeconds = median(fwd);
  out.backwardSeconds = median(bwd);
  return out;
}

}  // namespace sluice::partition
