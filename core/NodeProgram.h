// core::NodeProgram: runs a TorchScript graph node by node on the calling thread.
//
// This is Sluice's eager executor (pipeline.execution: eager) and the
// profiler's: every node runs through its registered operation (the
// dispatcher), in graph order, under the caller's grad mode, so autograd
// records the same graph eager PyTorch would. Because Sluice drives the
// loop, an observer sees each node before and after it runs: that is how
// memory/ attributes saved tensors to the node that is running and how a
// segment of nodes is re-run for recompute.
//
// Values live in slots; a value's slot is cleared after its last reader ran
// (as TorchScript's interpreter does), so an intermediate is freed as soon as
// nothing needs it, unless autograd saved it.
//
// Random nodes (core/RandomStream.h): with stream ids (per position, the
// node's index in the whole model's OpGraph), a random node run while a
// RandomKeyScope is active first seeds the generator with its stream
// (Note [random streams]), in run() and runNode() alike, so a recompute of
// the node replays its forward's draws. Without a key the generator is used
// as it is.
//
// Node positions are 0-based over graph->nodes() (constants included).
// Thread use: the program is immutable after construction; run() and
// runNode() may be called from several threads at once.
//
//   NodeProgram program(graph);
//   torch::jit::Stack out = program.run({x, w});  // graph outputs
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <memory>
#include <unordered_map>
#include <vector>

namespace torch::jit {
struct Graph;
struct Node;
struct Value;
}  // namespace torch::jit

namespace sluice {

class NodeObserver {
 public:
  virtual ~NodeObserver() = default;
  // Before node `pos` runs; `inputs` are its input values.
  virtual void beforeNode(int pos, const std::vector<c10::IValue>& inputs) {}
  // After it ran; `outputs` are its output values.
  virtual void afterNode(int pos, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>& outputs) {}
};

class NodeProgram {
 public:
  // streamIds: per position, the node's stable index (-1: none); empty: none.
  // A random node without one is a GraphError when run under a random key.
  explicit NodeProgram(std::shared_ptr<torch::jit::Graph> graph, std::vector<int> streamIds = {});
  ~NodeProgram();
  NodeProgram(const NodeProgram&) = delete;
  NodeProgram& operator=(const NodeProgram&) = delete;

  // Runs every node; returns the graph's outputs. Throws GraphError when the
  // input count differs, and whatever an operation throws.
  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs, NodeObserver* observer = nullptr) const;
  // Runs node `pos` alone: `stack` holds its inputs and, on return, its outputs.
  void runNode(int pos, std::vector<c10::IValue>& stack) const;

  int numNodes() const { return static_cast<int>(nodes_.size()); }
  torch::jit::Node* node(int pos) const { return nodes_[pos]; }
  const std::shared_ptr<torch::jit::Graph>& graph() const { return graph_; }
  // Position of the node that produces v; -1 for graph inputs.
  int producerOf(const torch::jit::Value* v) const;
  // Index among the graph inputs, or -1.
  int graphInputIndex(const torch::jit::Value* v) const;

 private:
  struct Step;
  static Step compileStep(torch::jit::Node* node);
  std::shared_ptr<torch::jit::Graph> graph_;
  std::vector<torch::jit::Node*> nodes_;
  std::vector<Step> steps_;
  int numSlots_ = 0;
  std::vector<int> outputSlots_;
  std::unordered_map<const torch::jit::Node*, int> positionOf_;
  std::unordered_map<const torch::jit::Value*, int> inputIndexOf_;
};

}  // namespace sluice
