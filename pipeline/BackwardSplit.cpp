#include "pipeline/BackwardSplit.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_map>
#include <unordered_set>

namespace sluice::pipeline {

using torch::autograd::Edge;
using torch::autograd::Node;

namespace {

// For every node reachable from the roots: does it lead to one of `targets`?
// Iterative post-order (stage graphs can be thousands of nodes deep).
std::unordered_map<Node*, bool> reachesTargets(const torch::autograd::edge_list& roots,
                                               const std::unordered_set<Node*>& targets) {
  std::unordered_map<Node*, bool> reach;
  std::vector<std::pair<Node*, size_t>> stack;
  for (auto& r : roots) {
    if (!r.is_valid() || reach.count(r.function.get())) continue;
    reach[r.function.get()] = targets.count(r.function.get()) > 0;
    stack.push_back({r.function.get(), 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->num_outputs()) {
        const Edge& e = node->next_edge(next++);
        if (!e.is_valid()) continue;
        Node* child = e.function.get();
        auto it = reach.find(child);
        if (it == reach.end()) {
          reach[child] = targets.count(child) > 0;
          stack.push_back({child, 0});
        } else if (it->second) {
          reach[node] = true;
        }
        continue;
      }
      Node* done = node;
      const bool r2 = reach[done];
      stack.pop_back();
      if (r2 && !stack.empty()) reach[stack.back().first] = true;
    }
  }
  return reach;
}

}  // namespace

namespace {

// The input region's nodes reached from the roots (each held by an owning
// pointer, from the edge that reached it): those that also feed the weight
// region (the frontier, where W re-enters) and those that feed inputs only.
struct InputRegion {
  bool walked = false;  // false: no root leads into the input region
  std::vector<std::shared_ptr<Node>> frontier, inputOnly;
};

template <class InRegion>
InputRegion walkInputRegion(const torch::autograd::edge_list& roots, const std::unordered_set<Node*>& targets,
                            InRegion inInputRegion) {
  InputRegion region;
  auto& frontier = region.frontier;
  auto& inputOnly = region.inputOnly;
  std::unordered_set<Node*> seen;
  std::vector<std::shared_ptr<Node>> walk;
  for (auto& r : roots) {
    if (inInputRegion(r) && seen.insert(r.function.get()).second) walk.push_back(r.function);
  }
  for (size_t k = 0; k < walk.size(); ++k) {
    auto node = walk[k];
    bool feedsWeights = false;
    for (size_t i = 0; i < node->num_outputs(); ++i) {
      const Edge& e = node->next_edge(i);
      if (!e.is_valid()) continue;
      if (inInputRegion(e)) {
        if (seen.insert(e.function.get()).second) walk.push_back(e.function);
      } else {
        feedsWeights = true;
      }
    }
    if (targets.count(node.get())) continue;
    (feedsWeights ? frontier : inputOnly).push_back(node);
  }

  region.walked = !walk.empty();
  return region;
}

// Runs the input region's backward from the roots that lead into it, keeping the graph for the weight half.
// Returns the gradients of the inputs' edges, then of each frontier node's inputs, node by node.
template <class InRegion>
torch::autograd::variable_list runInputRegion(const torch::autograd::edge_list& roots,
                                              const std::vector<torch::Tensor>& grads,
                                              const torch::autograd::edge_list& inputEdges,
                                              const std::vector<std::shared_ptr<Node>>& frontier,
                                              InRegion inInputRegion) {
  torch::autograd::edge_list outputs = inputEdges;
  for (auto& n : frontier) {
    for (uint32_t k = 0; k < n->num_inputs(); ++k) outputs.emplace_back(n, k);
  }
  torch::autograd::edge_list inputRoots;
  std::vector<torch::Tensor> inputRootGrads;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (inInputRegion(roots[i]) && grads[i].defined()) {
      inputRoots.push_back(roots[i]);
      inputRootGrads.push_back(grads[i]);
    }
  }
  return torch::autograd::Engine::get_default_engine().execute(
      inputRoots, inputRootGrads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, outputs);
}

}  // namespace

std::vector<torch::Tensor> BackwardSplit::runInput(const torch::autograd::edge_list& roots,
                                                   const std::vector<torch::Tensor>& grads,
                                                   const std::vector<torch::Tensor>& inputs) {
  std::vector<torch::Tensor> inputGrads(inputs.size());
  torch::autograd::edge_list inputEdges;
  std::vector<size_t> inputIndex;
  std::unordered_set<Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    inputEdges.push_back(torch::autograd::impl::gradient_edge(inputs[i]));
    inputIndex.push_back(i);
    targets.insert(inputEdges.back().function.get());
  }
  auto reach = reachesTargets(roots, targets);
  auto inInputRegion = [&](const Edge& e) {
    if (!e.is_valid()) return false;
    auto it = reach.find(e.function.get());
    return it != reach.end() && it->second;
  };

  auto [walked, frontier, inputOnly] = walkInputRegion(roots, targets, inInputRegion);

  // Roots that lead straight into the weight region keep their gradients for runWeight.
  for (size_t i = 0; i < roots.size(); ++i) {
    if (roots[i].is_valid() && !inInputRegion(roots[i]) && grads[i].defined()) {
      weightRoots_.push_back(roots[i]);
      weightGrads_.push_back(grads[i]);
    }
  }
  if (!walked) return inputGrads;  // no input gradient flows: all is weight work

  auto captured = runInputRegion(roots, grads, inputEdges, frontier, inInputRegion);
  for (size_t j = 0; j < inputIndex.size(); ++j) inputGrads[inputIndex[j]] = captured[j];
  size_t c = inputEdges.size();
  for (auto& n : frontier) {
    for (uint32_t k = 0; k < n->num_inputs(); ++k, ++c) {
      if (captured[c].defined()) {
        weightRoots_.emplace_back(n, k);
        weightGrads_.push_back(captured[c]);
      }
    }
    // From now on this node only feeds the weight region.
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      if (inInputRegion(n->next_edge(i))) n->next_edges()[i] = Edge();  // (set_next_edge asserts on nodes with parents)
    }
  }
  for (auto& n : inputOnly) n->release_variables();
  return inputGrads;
}

void BackwardSplit::runWeight() {
  auto roots = std::move(weightRoots_);
  auto grads = std::move(weightGrads_);
  weightRoots_.clear();
  weightGrads_.clear();
  if (roots.empty()) return;
  torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false, /*create_graph=*/false,
                                                        /*accumulate_grad=*/true);
}

}  // namespace sluice::pipeline
