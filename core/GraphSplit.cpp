#include "core/GraphSplit.h"

#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/Error.h"

namespace sluice {
namespace {

using torch::jit::Value;

std::string nearbyCuts(const OpGraph& g, int cut) {
  std::ostringstream os;
  int shown = 0;
  for (int c : g.validCuts()) {
    if (std::abs(c - cut) <= 8 && shown < 8) {
      os << (shown ? ", " : "") << c;
      ++shown;
    }
  }
  return shown ? os.str() : std::string("none nearby");
}

// Per parameter or buffer input the nodes [begin, end) read: those nodes, in order.
std::map<int, std::vector<int>> stageReaders(const OpGraph& g, int begin, int end) {
  std::map<int, std::vector<int>> readersOf;
  for (int n = begin; n < end; ++n) {
    for (auto& name : g.nodes()[n].inputs) {
      const int idx = g.inputIndexOfValue(name);
      if (idx < 0 || g.inputs()[idx].kind == InputKind::Data) continue;
      auto& r = readersOf[idx];
      if (r.empty() || r.back() != n) r.push_back(n);
    }
  }
  return readersOf;
}

// Adds the stage's inputs to its graph: its boundary values, then its parameters and buffers (Note [reader
// inputs]); maps each original input value to its stage input in `env`. Returns, for a parameter with one input
// per reading node, (node, input index) -> that node's own input.
std::map<std::pair<int, int>, Value*> addStageInputs(const OpGraph& g,
                                                     const std::unordered_map<std::string, Value*>& byName,
                                                     const std::map<int, std::vector<int>>& wholeReaders, int begin,
                                                     int end, StageGraph& st, std::unordered_map<Value*, Value*>& env) {
  auto& out = *st.graph;
  auto addInput = [&](Value* orig) {
    Value* v = out.addInput();
    v->setType(orig->type());
    if (orig->hasDebugName()) v->setDebugName(orig->debugName());
    env[orig] = v;
  };

  if (begin == 0) {
    for (auto& in : g.inputs()) {
      if (in.kind == InputKind::Data) st.boundaryInputs.push_back(in.value);
    }
  } else {
    st.boundaryInputs = g.liveAcross(begin);
  }
  for (auto& b : st.boundaryInputs) addInput(byName.at(b.name));

  // Note [reader inputs]: a parameter several nodes of the whole graph read
  // is one input per reading node (in node order), else one input.
  std::map<std::pair<int, int>, Value*> readerInput;  // (node, input index) -> its own stage input
  for (auto& [idx, readers] : stageReaders(g, begin, end)) {
    Value* orig = g.graph()->inputs()[idx];
    const bool perReader = g.inputs()[idx].kind == InputKind::Parameter && wholeReaders.at(idx).size() > 1;
    for (size_t k = 0; k < (perReader ? readers.size() : 1); ++k) {
      st.paramInputs.push_back(g.inputs()[idx].name);
      addInput(orig);
      if (perReader) readerInput[{readers[k], idx}] = env.at(orig);
    }
  }
  return readerInput;
}

StageGraph buildStage(const OpGraph& g, const std::unordered_map<std::string, Value*>& byName,
                      const std::map<int, std::vector<int>>& wholeReaders, int index, int begin, int end) {
  StageGraph st;
  st.index = index;
  st.firstNode = begin;
  st.endNode = end;
  st.graph = std::make_shared<torch::jit::Graph>();
  auto& out = *st.graph;
  std::unordered_map<Value*, Value*> env;

  const auto readerInput = addStageInputs(g, byName, wholeReaders, begin, end, st, env);

  std::function<Value*(Value*)> lookup = [&](Value* v) -> Value* {
    auto it = env.find(v);
    if (it != env.end()) return it->second;
    auto* producer = v->node();
    SLUICE_CHECK(producer->kind() != c10::prim::Param && g.isConstantLike(producer), GraphError,
                 "stage " << index << " reads %" << v->debugName()
                          << " which is neither one of its inputs nor a constant (internal split error)");
    auto* clone = out.createClone(producer, lookup);
    out.appendNode(clone);
    for (size_t i = 0; i < producer->outputs().size(); ++i) env[producer->output(i)] = clone->output(i);
    return env.at(v);
  };

  std::unordered_map<const torch::jit::Node*, int> indexOfClone;
  for (int n = begin; n < end; ++n) {
    for (auto& [key, input] : readerInput) {
      if (key.first == n) env[g.graph()->inputs()[key.second]] = input;
    }
    auto* orig = g.nodes()[n].irNode;
    auto* clone = out.createClone(orig, lookup);
    out.appendNode(clone);
    indexOfClone[clone] = n;
    for (size_t i = 0; i < orig->outputs().size(); ++i) env[orig->output(i)] = clone->output(i);
  }

  if (end == g.numNodes()) {
    for (auto& name : g.outputNames()) st.outputs.push_back(g.value(name));
  } else {
    st.outputs = g.liveAcross(end);
  }
  // GraphFunction requires a single output: stages return one tuple (see StageModule).
  std::vector<Value*> results;
  for (auto& o : st.outputs) results.push_back(lookup(byName.at(o.name)));
  out.registerOutput(out.insertNode(out.createTuple(results))->output());
  for (auto* node : out.nodes()) {
    auto it = indexOfClone.find(node);
    st.nodeIndex.push_back(it == indexOfClone.end() ? -1 : it->second);
  }
  return st;
}

}  // namespace

std::vector<StageGraph> splitGraph(const OpGraph& g, const std::vector<int>& cuts) {
  int prev = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    SLUICE_CHECK(cuts[i] > prev && cuts[i] < g.numNodes(), GraphError,
                 "cut " << i << " at node " << cuts[i] << " must be in (" << prev << ", " << g.numNodes()
                        << ") so that every stage has at least one node");
    const std::string why = g.whyInvalidCut(cuts[i]);
    SLUICE_CHECK(why.empty(), GraphError,
                 "cut at node " << cuts[i] << " is not valid: " << why << "; valid cuts near it: " << nearbyCuts(g, cuts[i]));
    prev = cuts[i];
  }
  std::unordered_map<std::string, Value*> byName;
  for (auto* v : g.graph()->inputs()) byName[v->debugName()] = v;
  for (auto* n : g.graph()->nodes()) {
    for (auto* o : n->outputs()) byName[o->debugName()] = o;
  }
  const auto wholeReaders = stageReaders(g, 0, g.numNodes());
  std::vector<StageGraph> stages;
  int begin = 0;
  for (size_t s = 0; s <= cuts.size(); ++s) {
    int end = s < cuts.size() ? cuts[s] : g.numNodes();
    stages.push_back(buildStage(g, byName, wholeReaders, static_cast<int>(s), begin, end));
    begin = end;
  }
  return stages;
}

}  // namespace sluice
