// profileGraph(): see Profile.h.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include "core/Error.h"
#include "memory/SavedTensorHooks.h"
#include "partition/Profile.h"

namespace sluice::partition {
namespace {

using Clock = std::chrono::steady_clock;
using torch::jit::IValue;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

bool isRandom(const std::string& op) {
  for (auto* word : {"rand", "dropout", "bernoulli", "normal", "multinomial", "uniform"}) {
    if (op.find(word) != std::string::npos) return false;
  }
  return true;
}

void collectTensors(const IValue& v, std::vector<torch::Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const auto& t : v.toTensorList()) out.push_back(t);
  }
}

// List/tuple construction and unpacking have no operator schema (the
// TorchScript interpreter implements them itself); so does this runner.
bool runStructural(const torch::jit::Node* node, torch::jit::Stack& stack) {
  const auto kind = node->kind();
  if (kind == c10::prim::ListConstruct) {
    auto listType = node->output()->type()->expect<c10::ListType>();
    c10::impl::GenericList list(listType->getElementType());
    for (auto& v : stack) list.push_back(v);
    stack.clear();
    stack.emplace_back(std::move(list));
    return true;
  }
  if (kind == c10::prim::TupleConstruct) {
    auto tuple = c10::ivalue::Tuple::create(std::vector<IValue>(stack.begin(), stack.end()));
    stack.clear();
    stack.emplace_back(std::move(tuple));
    return true;
  }
  if (kind == c10::prim::ListUnpack || kind == c10::prim::TupleUnpack) {
    IValue v = stack.at(0);
    std::vector<IValue> elements =
        v.isTuple() ? v.toTupleRef().elements().vec() : std::vector<IValue>(v.toListRef().begin(), v.toListRef().end());
    SLUICE_CHECK(elements.size() == node->outputs().size(), GraphError,
                 "profile: " << kind.toQualString() << " expected " << node->outputs().size() << " elements, got "
                             << elements.size());
    stack = torch::jit::Stack(elements.begin(), elements.end());
    return true;
  }
  return false;
}

void runNode(const torch::jit::Node* node, torch::jit::Stack& stack) {
  if (!runStructural(node, stack)) node->getOperation()(stack);
}

}  // namespace

Profile profileGraph(const OpGraph& g, const std::vector<torch::Tensor>& inputs, const ProfileOptions& options) {
  auto& graph = *g.graph();
  SLUICE_CHECK(inputs.size() == graph.inputs().size(), GraphError,
               "profile: the graph has " << graph.inputs().size() << " inputs, got " << inputs.size());
  memory::SavedBytesCounter counter;
  counter.holdPackedTensors(true);  // each node's graph is freed after its backward; see holdPackedTensors
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (g.inputs()[i].kind != InputKind::Data) counter.exclude(inputs[i]);
  }
  std::unordered_map<const torch::jit::Node*, int> indexOf;
  for (auto& n : g.nodes()) indexOf[n.irNode] = n.index;

  Profile profile;
  profile.graphHash = g.hash();
  profile.iterations = options.iterations;
  profile.nodes.resize(g.numNodes());
  std::vector<std::vector<double>> fwd(g.numNodes()), bwd(g.numNodes());
  std::unordered_set<std::string> paramsSeen;
  for (auto& n : g.nodes()) {
    auto& p = profile.nodes[n.index];
    p.index = n.index;
    p.op = n.op;
    p.recomputable = isRandom(n.op);
    for (auto& name : n.params) {
      if (!paramsSeen.insert(name).second) continue;
      for (size_t i = 0; i < g.inputs().size(); ++i) {
        if (g.inputs()[i].name == name) p.paramBytes += g.inputs()[i].value.bytes();
      }
    }
  }

  const int runs = options.warmup + options.iterations;
  for (int run = 0; run < runs; ++run) {
    const bool measureMemory = run == 0, timed = run >= options.warmup;
    std::unordered_map<const torch::jit::Value*, IValue> env;
    for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs()[i]] = inputs[i];
    for (auto* node : graph.nodes()) {
      if (node->kind() == c10::prim::Constant) {
        env[node->output()] = *torch::jit::toIValue(node->output());
        continue;
      }
      auto found = indexOf.find(node);
      const bool indexed = found != indexOf.end();
      const bool inPlace = indexed && !g.nodes()[found->second].op.empty() && g.nodes()[found->second].op.back() == '_';
      torch::jit::Stack stack;
      std::vector<torch::Tensor> leaves;
      for (auto* in : node->inputs()) {
        IValue v = env.at(in);
        if (indexed && v.isTensor()) {
          auto t = v.toTensor().detach();
          const bool grad = t.is_floating_point() && g.value(in->debugName()).requiresGrad;
          if (grad) {
            t.requires_grad_(true);
            leaves.push_back(t);
          }
          // An in-place op may not write into a leaf: give it a (non-leaf) copy, made before timing.
          v = (inPlace && grad) ? IValue(t.clone()) : IValue(t);
        }
        stack.push_back(std::move(v));
      }
      if (!indexed) {
        runNode(node, stack);
      } else {
        auto& p = profile.nodes[found->second];
        const int64_t before = counter.bytes();
        auto t0 = Clock::now();
        if (measureMemory) {
          memory::SavedTensorScope scope(counter.factory());
          runNode(node, stack);
        } else {
          runNode(node, stack);
        }
        auto t1 = Clock::now();
        if (measureMemory) p.savedBytes = counter.bytes() - before;
        std::vector<torch::Tensor> outs, grads;
        for (auto& v : stack) collectTensors(v, outs);
        if (measureMemory) {
          p.outputBytes = 0;
          for (auto& t : outs) p.outputBytes += static_cast<int64_t>(t.nbytes());
        }
        std::vector<torch::Tensor> roots;
        for (auto& t : outs) {
          if (t.requires_grad()) {
            roots.push_back(t);
            grads.push_back(torch::ones_like(t));
          }
        }
        double backward = 0;
        if (!roots.empty() && !leaves.empty()) {
          auto t2 = Clock::now();
          torch::autograd::grad(roots, leaves, grads, /*retain_graph=*/false, /*create_graph=*/false,
                                /*allow_unused=*/true);
          backward = seconds(t2, Clock::now());
        }
        if (timed) {
          fwd[found->second].push_back(seconds(t0, t1));
          bwd[found->second].push_back(backward);
        }
      }
      for (size_t i = 0; i < node->outputs().size(); ++i) {
        IValue v = stack.at(i);
        if (v.isTensor()) v = v.toTensor().detach();
        env[node->output(i)] = std::move(v);
      }
    }
  }
  counter.reset();
  for (int i = 0; i < g.numNodes(); ++i) {
    profile.nodes[i].forwardSeconds = median(fwd[i]);
    profile.nodes[i].backwardSeconds = median(bwd[i]);
  }
  return profile;
}

std::pair<double, double> profileLoss(const std::function<torch::Tensor(const torch::Tensor&)>& loss,
                                      const torch::Tensor& output, const ProfileOptions& options) {
  std::vector<double> fwd, bwd;
  for (int run = 0; run < options.warmup + options.iterations; ++run) {
    auto leaf = output.detach().requires_grad_(output.is_floating_point());
    auto t0 = Clock::now();
    auto l = loss(leaf);
    auto t1 = Clock::now();
    if (leaf.requires_grad()) l.backward();
    auto t2 = Clock::now();
    if (run >= options.warmup) {
      fwd.push_back(seconds(t0, t1));
      bwd.push_back(seconds(t1, t2));
    }
  }
  return {median(fwd), median(bwd)};
}

}  // namespace sluice::partition
