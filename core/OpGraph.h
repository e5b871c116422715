// core::OpGraph: a model captured as an aten-level op graph.
//
// capture() (core/Capture.h) runs LibTorch's tracer over a module's forward
// with the data inputs, the parameters and the buffers all passed as graph
// inputs (named by module path, e.g. "h.3.attn.c_proj.weight"), so the graph
// reads no weights from constants and any contiguous range of nodes can run
// on another rank with that rank's copy of the parameters. This header is the
// index the planner reads (shapes, dtypes, cuts): it needs no more of LibTorch
// than the scalar types (the IR itself is behind forward declarations).
//
// Node index: every IR node except the "constant-like" ones (prim::Constant and
// nodes whose inputs are all constant-like and whose outputs are not tensors,
// such as the int lists of view shapes). Constant-like nodes are cloned into
// whatever stage reads them instead of being sent across a cut.
//
// A cut k (1 <= k < numNodes()) puts nodes [0, k) before and [k, n) after it.
// liveAcross(k) lists the values a later stage needs from earlier ones: data
// inputs and node outputs produced before k and read at or after k (or
// returned by the graph). A cut is valid when all of those are tensors and
// no node at or after it writes in place into one of them (or into a view of
// one): the next stage receives such a value as a leaf that requires grad,
// and autograd forbids writing into a leaf (see Note [in-place across a cut]).
//
// Not thread-safe.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch::jit {
struct Graph;
struct Value;
struct Node;
}  // namespace torch::jit

namespace sluice {

struct ValueInfo {
  std::string name;            // IR debug name
  std::vector<int64_t> shape;  // concrete sizes (tensors only)
  c10::ScalarType dtype = c10::kFloat;
  bool isTensor = false;
  bool requiresGrad = false;
  int64_t bytes() const;
};

enum class InputKind { Data, Parameter, Buffer };

struct GraphInput {
  std::string name;  // module path for parameters/buffers, the given name for data
  InputKind kind = InputKind::Data;
  ValueInfo value;
};

struct OpNode {
  int index = 0;
  std::string op;                      // e.g. "aten::linear"
  std::vector<std::string> inputs;     // IR debug names
  std::vector<ValueInfo> outputs;
  std::vector<std::string> params;     // parameters/buffers read directly
  torch::jit::Node* irNode = nullptr;  // into OpGraph::graph()
};

class OpGraph {
 public:
  OpGraph(std::shared_ptr<torch::jit::Graph> graph, std::vector<GraphInput> inputs);

  const std::shared_ptr<torch::jit::Graph>& graph() const { return graph_; }
  const std::vector<GraphInput>& inputs() const { return inputs_; }
  const std::vector<OpNode>& nodes() const { return nodes_; }
  int numNodes() const { return static_cast<int>(nodes_.size()); }
  const std::vector<std::string>& outputNames() const { return outputs_; }

  // Stable hash of the IR and the input names/shapes (hex string).
  const std::string& hash() const { return hash_; }

  // Causal attentions capture() rewrote into one node (Note [attention fusion]);
  // 0 for a graph loaded from a file.
  int fusedAttentions() const { return fusedAttentions_; }
  void setFusedAttentions(int n) { fusedAttentions_ = n; }

  // Values needed after cut k that are produced before it (see header comment).
  std::vector<ValueInfo> liveAcross(int cut) const;
  bool isValidCut(int cut) const;
  // Why cut k is not valid ("" when it is).
  std::string whyInvalidCut(int cut) const;
  std::vector<int> validCuts() const;

  // Info for an IR value by debug name (throws GraphError when unknown).
  const ValueInfo& value(const std::string& name) const;
  // Index of the graph input with this IR debug name, or -1.
  int inputIndexOfValue(const std::string& irName) const;
  bool isConstantLike(const torch::jit::Node* node) const;

  // One line per node: "  12 aten::linear(%x, h.0.attn.c_attn.weight, ...) -> %y Float[4,16,96]".
  std::string toString() const;

  // Protobuf round trip (binary). fromProto re-parses the IR text.
  std::string toProtoBytes() const;
  static OpGraph fromProtoBytes(const std::string& bytes);
  void save(const std::string& path) const;  // write to temp file, then rename
  static OpGraph load(const std::string& path);

 private:
  void buildIndex();
  void indexNode(torch::jit::Node* node, const std::unordered_map<const torch::jit::Value*, int>& inputIdx);
  void findInPlaceWrites();

  std::shared_ptr<torch::jit::Graph> graph_;
  std::vector<GraphInput> inputs_;
  std::vector<OpNode> nodes_;
  std::vector<std::string> outputs_;
  std::unordered_map<std::string, ValueInfo> values_;
  std::unordered_map<std::string, int> producer_;   // value -> node index (-1: data input)
  std::unordered_map<std::string, int> lastUse_;    // value -> last reading node index (n: graph output)
  std::vector<std::string> liveCandidates_;          // data inputs then node outputs, in order
  std::vector<int> writtenAcross_;  // cut -> a node at or after it writing into a value from before it (-1: none)
  std::string hash_;
  int fusedAttentions_ = 0;
};

}  // namespace sluice
