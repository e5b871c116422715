#include "core/OpGraph.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <fstream>
#include <iomanip>
#include <sstream>
#include <unordered_set>

#include "core/Error.h"
#include "core/Files.h"
#include "sluice_graph.pb.h"

namespace sluice {
namespace {

ValueInfo infoOf(const torch::jit::Value* v) {
  ValueInfo info;
  info.name = v->debugName();
  if (auto tt = v->type()->cast<c10::TensorType>()) {
    info.isTensor = true;
    if (auto sizes = tt->sizes().concrete_sizes()) info.shape = *sizes;
    if (tt->scalarType()) info.dtype = *tt->scalarType();
    info.requiresGrad = tt->requiresGrad().value_or(false);
  }
  return info;
}

// IR debug names may not carry dots followed by digits ("h.0" would read as
// a uniquing suffix), so module paths are mapped to underscores.
std::string irNameFor(const std::string& path) {
  std::string s = "in_";
  for (char c : path) s += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return s;
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string dtypeName(c10::ScalarType t) { return c10::toString(t); }

c10::ScalarType dtypeFromName(const std::string& s) {
  for (auto t : {c10::kFloat, c10::kDouble, c10::kHalf, c10::kBFloat16, c10::kLong, c10::kInt, c10::kShort,
                 c10::kChar, c10::kByte, c10::kBool}) {
    if (s == c10::toString(t)) return t;
  }
  throw GraphError("unknown dtype '" + s + "' in serialized graph");
}

}  // namespace

int64_t ValueInfo::bytes() const {
  if (!isTensor) return 0;
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n * static_cast<int64_t>(c10::elementSize(dtype));
}

OpGraph::OpGraph(std::shared_ptr<torch::jit::Graph> graph, std::vector<GraphInput> inputs)
    : graph_(std::move(graph)), inputs_(std::move(inputs)) {
  SLUICE_CHECK(graph_->inputs().size() == inputs_.size(), GraphError,
               "graph has " << graph_->inputs().size() << " inputs but " << inputs_.size() << " names were given");
  for (size_t i = 0; i < inputs_.size(); ++i) {
    auto* v = graph_->inputs()[i];
    v->setDebugName(irNameFor(inputs_[i].name));
    inputs_[i].value = infoOf(v);
  }
  buildIndex();
}

bool OpGraph::isConstantLike(const torch::jit::Node* node) const {
  if (node->kind() == c10::prim::Constant) return true;
  for (auto* out : node->outputs()) {
    if (out->type()->cast<c10::TensorType>()) return false;
  }
  if (node->inputs().empty()) return false;
  for (auto* in : node->inputs()) {
    if (in->node()->kind() == c10::prim::Param) return false;
    if (!isConstantLike(in->node())) return false;
  }
  return true;
}

// Records the values `node` makes and, unless it is constant-like, appends it as an OpNode with its reads.
void OpGraph::indexNode(torch::jit::Node* node, const std::unordered_map<const torch::jit::Value*, int>& inputIdx) {
  // Note [requires grad by dataflow]: the tracer's types do not always say
  // that a value requires grad (e.g. the convolution feeding a training-mode
  // BatchNorm); a floating tensor made from anything that requires grad
  // does. Stage boundaries exchange gradients by this flag, so missing it
  // would silently cut the gradient at a cut; having it where the op is not
  // differentiable only sends a zero gradient back.
  bool gradIn = false;
  for (auto* in : node->inputs()) {
    auto it = values_.find(in->debugName());
    gradIn = gradIn || (it != values_.end() && it->second.requiresGrad);
  }
  for (auto* out : node->outputs()) {
    auto info = infoOf(out);
    if (gradIn && info.isTensor && c10::isFloatingType(info.dtype)) info.requiresGrad = true;
    values_[out->debugName()] = info;
  }
  if (isConstantLike(node)) return;
  OpNode op;
  op.index = static_cast<int>(nodes_.size());
  op.op = node->kind().toQualString();
  op.irNode = node;
  for (auto* in : node->inputs()) {
    op.inputs.push_back(in->debugName());
    auto it = inputIdx.find(in);
    if (it != inputIdx.end() && inputs_[it->second].kind != InputKind::Data) op.params.push_back(inputs_[it->second].name);
    auto& last = lastUse_[in->debugName()];
    last = std::max(last, op.index);
  }
  for (auto* out : node->outputs()) {
    op.outputs.push_back(values_[out->debugName()]);
    producer_[out->debugName()] = op.index;
    liveCandidates_.push_back(out->debugName());
  }
  nodes_.push_back(std::move(op));
}

void OpGraph::buildIndex() {
  nodes_.clear();
  values_.clear();
  producer_.clear();
  lastUse_.clear();
  liveCandidates_.clear();
  std::unordered_map<const torch::jit::Value*, int> inputIdx;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    auto* v = graph_->inputs()[i];
    inputIdx[v] = static_cast<int>(i);
    values_[v->debugName()] = inputs_[i].value;
    if (inputs_[i].kind == InputKind::Data) {
      producer_[v->debugName()] = -1;
      liveCandidates_.push_back(v->debugName());
    }
  }
  for (auto* node : graph_->nodes()) indexNode(node, inputIdx);
  outputs_.clear();
  for (auto* out : graph_->outputs()) {
    outputs_.push_back(out->debugName());
    lastUse_[out->debugName()] = numNodes();
  }
  findInPlaceWrites();
  std::ostringstream key;
  key << graph_->toString();
  for (auto& in : inputs_) {
    key << in.name << ":" << static_cast<int>(in.kind) << ":";
    for (auto d : in.value.shape) key << d << ",";
  }
  std::ostringstream hex;
  hex << std::hex << std::setw(16) << std::setfill('0') << fnv1a(key.str());
  hash_ = hex.str();
}

std::vector<ValueInfo> OpGraph::liveAcross(int cut) const {
  std::vector<ValueInfo> live;
  for (auto& name : liveCandidates_) {
    auto p = producer_.at(name);
    auto it = lastUse_.find(name);
    if (p < cut && it != lastUse_.end() && it->second >= cut) live.push_back(values_.at(name));
  }
  return live;
}

bool OpGraph::isValidCut(int cut) const { return whyInvalidCut(cut).empty(); }

std::string OpGraph::whyInvalidCut(int cut) const {
  if (cut <= 0 || cut >= numNodes()) return "a cut must lie in [1, " + std::to_string(numNodes()) + ")";
  for (auto& v : liveAcross(cut)) {
    if (!v.isTensor) return "it would send a non-tensor value (%" + v.name + ") to the next stage";
  }
  if (writtenAcross_[cut] >= 0) {
    const auto& n = nodes_[writtenAcross_[cut]];
    return "node " + std::to_string(n.index) + " (" + n.op +
           ") writes in place into a value the next stage would receive from this one";
  }
  return "";
}

// Note [in-place across a cut]: a stage receives each boundary value as a
// fresh leaf that requires grad (its gradient goes back to the sender), and
// autograd refuses in-place writes into such a leaf or a view of it. In one
// process the same write goes into an intermediate and is fine (LibTorch's
// linear, traced, is matmul then add_ into the product). So a cut is invalid
// between the node producing a value and any later in-place write into it or
// into a view of it. Aliases follow the schemas' alias annotations: a return
// annotated like an input (views, in-place results) aliases that input.
void OpGraph::findInPlaceWrites() {
  const int n = numNodes();
  writtenAcross_.assign(n + 1, -1);
  std::unordered_map<std::string, std::string> rootOf;  // alias -> the value it aliases (transitively)
  auto root = [&](const std::string& v) {
    auto it = rootOf.find(v);
    return it == rootOf.end() ? v : it->second;
  };
  for (const auto& node : nodes_) {
    const torch::jit::Node* ir = node.irNode;
    if (!ir) continue;
    if (ir->kind() == c10::prim::ListUnpack || ir->kind() == c10::prim::TupleUnpack) {
      for (auto* out : ir->outputs()) rootOf[out->debugName()] = root(ir->inputs()[0]->debugName());
      continue;
    }
    const c10::FunctionSchema* schema = ir->maybeSchema();
    if (!schema) continue;
    std::string aliased;  // the root of the first input with an alias annotation
    const size_t args = std::min(schema->arguments().size(), ir->inputs().size());
    for (size_t i = 0; i < args; ++i) {
      const auto* info = schema->arguments()[i].alias_info();
      if (!info) continue;
      const std::string r = root(ir->inputs()[i]->debugName());
      if (aliased.empty()) aliased = r;
      if (!info->isWrite()) continue;
      auto p = producer_.find(r);
      if (p == producer_.end() || p->second < 0) continue;  // a graph input: no stage receives it
      for (int c = p->second + 1; c <= node.index && c <= n; ++c) {
        if (writtenAcross_[c] < 0) writtenAcross_[c] = node.index;
      }
    }
    if (aliased.empty()) continue;
    for (size_t j = 0; j < schema->returns().size() && j < ir->outputs().size(); ++j) {
      // Annotated returns alias; so do the lists of views (split, chunk, unbind: Tensor(a)[]).
      const auto& ret = schema->returns()[j];
      if (ret.alias_info() || ret.type()->kind() == c10::TypeKind::ListType) {
        rootOf[ir->outputs()[j]->debugName()] = aliased;
      }
    }
  }
}

std::vector<int> OpGraph::validCuts() const {
  std::vector<int> cuts;
  for (int k = 1; k < numNodes(); ++k) {
    if (isValidCut(k)) cuts.push_back(k);
  }
  return cuts;
}

const ValueInfo& OpGraph::value(const std::string& name) const {
  auto it = values_.find(name);
  SLUICE_CHECK(it != values_.end(), GraphError, "no value named %" << name << " in the graph");
  return it->second;
}

int OpGraph::inputIndexOfValue(const std::string& irName) const {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (graph_->inputs()[i]->debugName() == irName) return static_cast<int>(i);
  }
  return -1;
}

std::string OpGraph::toString() const {
  std::ostringstream os;
  std::unordered_map<std::string, std::string> inputName;
  for (size_t i = 0; i < inputs_.size(); ++i) inputName[graph_->inputs()[i]->debugName()] = inputs_[i].name;
  for (auto& n : nodes_) {
    os << std::setw(5) << n.index << " " << n.op << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto it = inputName.find(n.inputs[i]);
      os << (i ? ", " : "") << (it != inputName.end() ? it->second : "%" + n.inputs[i]);
    }
    os << ") ->";
    for (auto& o : n.outputs) {
      os << " %" << o.name;
      if (o.isTensor) {
        os << " " << dtypeName(o.dtype) << "[";
        for (size_t i = 0; i < o.shape.size(); ++i) os << (i ? "," : "") << o.shape[i];
        os << "]";
      }
    }
    os << "\n";
  }
  return os.str();
}

std::string OpGraph::toProtoBytes() const {
  proto::OpGraph pg;
  pg.set_ir(graph_->toString());
  pg.set_hash(hash_);
  auto fill = [](proto::ValueInfo* out, const ValueInfo& v) {
    out->set_name(v.name);
    for (auto d : v.shape) out->add_shape(d);
    out->set_dtype(v.isTensor ? dtypeName(v.dtype) : "");
    out->set_is_tensor(v.isTensor);
  };
  for (auto& in : inputs_) {
    auto* gi = pg.add_inputs();
    gi->set_name(in.name);
    gi->set_kind(static_cast<proto::GraphInput::Kind>(static_cast<int>(in.kind)));
    fill(gi->mutable_value(), in.value);
  }
  for (auto& n : nodes_) {
    auto* pn = pg.add_nodes();
    pn->set_index(n.index);
    pn->set_op(n.op);
    for (auto& i : n.inputs) pn->add_inputs(i);
    for (auto& o : n.outputs) fill(pn->add_outputs(), o);
    for (auto& p : n.params) pn->add_params(p);
  }
  for (auto& o : outputs_) pg.add_outputs(o);
  return pg.SerializeAsString();
}

OpGraph OpGraph::fromProtoBytes(const std::string& bytes) {
  proto::OpGraph pg;
  SLUICE_CHECK(pg.ParseFromString(bytes), GraphError, "serialized graph is truncated or not an OpGraph");
  auto graph = std::make_shared<torch::jit::Graph>();
  try {
    torch::jit::parseIR(pg.ir(), graph.get());
  } catch (const std::exception& e) {
    throw GraphError(std::string("cannot parse the serialized graph IR: ") + e.what());
  }
  std::vector<GraphInput> inputs;
  for (auto& gi : pg.inputs()) {
    GraphInput in;
    in.name = gi.name();
    in.kind = static_cast<InputKind>(static_cast<int>(gi.kind()));
    if (gi.value().is_tensor()) in.value.dtype = dtypeFromName(gi.value().dtype());
    inputs.push_back(in);
  }
  OpGraph g(graph, inputs);
  SLUICE_CHECK(g.hash() == pg.hash(), GraphError,
               "serialized graph hash " << pg.hash() << " does not match its IR (hash " << g.hash() << ")");
  return g;
}

void OpGraph::save(const std::string& path) const { writeFileAtomically(path, toProtoBytes()); }

OpGraph OpGraph::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SLUICE_CHECK(f, GraphError, "cannot open graph file " << path);
  std::stringstream ss;
  ss << f.rdbuf();
  return fromProtoBytes(ss.str());
}

}  // namespace sluice
