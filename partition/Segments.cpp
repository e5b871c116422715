#include "partition/Segments.h"

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "core/Error.h"

namespace sluice::partition {
namespace {

bool holdsTensors(const c10::TypePtr& type) {
  if (type->cast<c10::TensorType>()) return true;
  for (const auto& contained : type->containedTypes()) {
    if (holdsTensors(contained)) return true;
  }
  return false;
}

}  // namespace

namespace {

// The last node reading any value that lives on each storage (the graph's
// outputs count as read after the last node).
std::map<memory::StorageKey, int> lastReaders(const OpGraph& g, const memory::MemoryFacts& facts) {
  const int n = g.numNodes();
  std::map<memory::StorageKey, int> lastReader;
  std::unordered_map<std::string, memory::StorageKey> storageOfValue;
  for (auto& node : g.nodes()) {
    const auto& outs = facts.outputs[node.index];
    for (size_t i = 0; i < node.outputs.size() && i < outs.size(); ++i) {
      if (outs[i].kind == memory::ValueStorage::Node) storageOfValue[node.outputs[i].name] = outs[i].key;
    }
    for (auto& in : node.inputs) {
      auto it = storageOfValue.find(in);
      if (it != storageOfValue.end()) lastReader[it->second] = std::max(lastReader[it->second], node.index);
    }
  }
  for (auto& name : g.outputNames()) {
    auto it = storageOfValue.find(name);
    if (it != storageOfValue.end()) lastReader[it->second] = n;
  }
  return lastReader;
}

// The saved storages a segment reads from outside it (rebuilt or read back
// before it runs), as indices into savedStorages' result.
std::vector<int> segmentInputs(const OpGraph& g, const memory::MemoryFacts& facts,
                               const std::unordered_map<std::string, std::pair<int, int>>& producedBy,
                               const std::map<memory::StorageKey, int>& indexOf, const std::set<int>& segment,
                               const memory::StorageKey& own) {
  std::set<int> inputs;
  for (int node : segment) {
    for (auto* in : g.nodes()[node].irNode->inputs()) {
      auto prod = producedBy.find(in->debugName());
      if (prod == producedBy.end() || segment.count(prod->second.first)) continue;
      const auto& vs = facts.outputs[prod->second.first].at(prod->second.second);
      if (vs.kind != memory::ValueStorage::Node || vs.key == own) continue;
      auto it = indexOf.find(vs.key);
      if (it != indexOf.end()) inputs.insert(it->second);
    }
  }
  return {inputs.begin(), inputs.end()};
}

using ProducedBy = std::unordered_map<std::string, std::pair<int, int>>;  // value -> (node, output)
using FactByKey = std::map<memory::StorageKey, const memory::StorageFact*>;

// What recomputing saved storage f re-runs (Segments.h): its producer and its
// in-place writers before its first saver, closed over the inputs that must
// be rebuilt.
std::set<int> recomputeSegment(const OpGraph& g, const memory::MemoryFacts& facts, const ProducedBy& producedBy,
                               const FactByKey& byKey, const memory::StorageFact& f) {
  auto isSaved = [&](const memory::StorageKey& k) {
    auto it = byKey.find(k);
    return it != byKey.end() && !it->second->savers.empty();
  };
  const int producer = f.key.node, firstSaver = f.savers.front();
  std::set<int> segment{producer};
  std::vector<int> work{producer};
  auto addWriters = [&](const memory::StorageFact& fact, int before) {
    for (int w : fact.writers) {
      if (w < before && segment.insert(w).second) work.push_back(w);
    }
  };
  addWriters(f, firstSaver + 1);
  while (!work.empty()) {
    const int node = work.back();
    work.pop_back();
    const auto* ir = g.nodes()[node].irNode;
    for (auto* in : ir->inputs()) {
      auto prod = producedBy.find(in->debugName());
      if (prod == producedBy.end()) continue;  // a graph input or a constant
      const auto [m, k] = prod->second;
      const auto& vs = facts.outputs[m].at(k);
      bool rebuild = false;
      if (vs.kind == memory::ValueStorage::Node) {
        rebuild = !isSaved(vs.key);
        if (rebuild) {
          auto fact = byKey.find(vs.key);
          if (fact != byKey.end()) addWriters(*fact->second, node);
        }
      } else if (vs.kind == memory::ValueStorage::NotTensor) {
        rebuild = holdsTensors(in->type());  // a list of tensors: rebuild the list
      }
      if (rebuild && segment.insert(m).second) work.push_back(m);
    }
  }
  return segment;
}

}  // namespace

std::vector<SavedStorage> savedStorages(const OpGraph& g, const memory::MemoryFacts& facts) {
  const int n = g.numNodes();
  SLUICE_CHECK(static_cast<int>(facts.outputs.size()) == n, PlanError,
               "partition: the profile's memory facts cover " << facts.outputs.size() << " nodes, the graph has " << n
                                                              << "; profile this config again");
  ProducedBy producedBy;
  for (auto& node : g.nodes()) {
    for (size_t i = 0; i < node.outputs.size(); ++i) producedBy[node.outputs[i].name] = {node.index, static_cast<int>(i)};
  }
  auto lastReader = lastReaders(g, facts);
  FactByKey byKey;
  for (auto& f : facts.storages) byKey[f.key] = &f;

  std::vector<SavedStorage> out;
  std::map<memory::StorageKey, int> indexOf;  // into out
  for (auto& f : facts.storages) {
    if (!f.savers.empty()) indexOf.emplace(f.key, static_cast<int>(indexOf.size()));
  }
  for (auto& f : facts.storages) {
    if (f.savers.empty()) continue;
    SavedStorage s;
    s.producer = f.key.node;
    s.slot = f.key.slot;
    s.bytes = f.bytes;
    s.firstSaver = f.savers.front();
    s.savers = f.savers;
    s.lastReader = std::max(f.savers.back(), lastReader.count(f.key) ? lastReader[f.key] : 0);
    const std::set<int> segment = recomputeSegment(g, facts, producedBy, byKey, f);
    s.segment.assign(segment.begin(), segment.end());
    s.inputs = segmentInputs(g, facts, producedBy, indexOf, segment, f.key);
    for (int node : s.segment) {
      if (node < static_cast<int>(facts.writesParameter.size()) && facts.writesParameter[node]) s.lastParamWriter = node;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace sluice::partition
