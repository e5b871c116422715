// StageMemory: attribution of saved tensors during forward (see the header).
#include "memory/StageMemory.h"

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <set>

#include "core/Tensors.h"
#include "core/Error.h"
#include "core/RandomStream.h"
#include "memory/SavedRecord.h"

namespace sluice::memory {

using detail::Captured;
using detail::Context;
using detail::Entry;
using detail::MicroBatchState;
using detail::PlanHooks;
using detail::Record;
using detail::SegmentState;
using detail::storageOf;

const std::vector<Choice<MemoryPolicy>>& memoryPolicies() {
  static const std::vector<Choice<MemoryPolicy>> t = {
      {MemoryPolicy::Plan, "plan", "keep, swap or recompute each saved storage, as the partitioner chooses"},
      {MemoryPolicy::None, "none", "keep everything"},
      {MemoryPolicy::FullRecompute, "full_recompute", "recompute every transformer block but its output"}};
  return t;
}

const char* actionName(TensorAction a) {
  switch (a) {
    case TensorAction::Keep: return "keep";
    case TensorAction::Swap: return "swap";
    case TensorAction::Recompute: return "recompute";
  }
  return "?";
}

bool MemoryPlan::freesAnything() const {
  for (auto& d : decisions) {
    if (d.action != TensorAction::Keep) return true;
  }
  return false;
}

bool MemoryPlan::swaps() const {
  for (auto& d : decisions) {
    if (d.action == TensorAction::Swap) return true;
  }
  return false;
}

const StorageDecision* MemoryPlan::find(const StorageKey& key) const {
  for (auto& d : decisions) {
    if (d.key == key) return &d;
  }
  return nullptr;
}

int MemoryFacts::find(const StorageKey& key) const {
  for (size_t i = 0; i < storages.size(); ++i) {
    if (storages[i].key == key) return static_cast<int>(i);
  }
  return -1;
}

namespace {

void addUnique(std::vector<int>& v, int x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) {
    v.push_back(x);
    std::sort(v.begin(), v.end());
  }
}

// Note [captures become pins]: a segment's captured input on a storage the
// plan frees is held as a reference to that storage's record, not as the
// tensor, from the moment the record exists (the input's first save; at once
// when it was saved before the capture). Held as a tensor until the end of
// forward, every captured storage of the micro-batch stayed in memory until
// then: under full recompute the whole stage's activations at once, where
// the plan counts each freed storage only from its first saver to its last
// forward reader.
void pinCapture(detail::Captured& cap, std::shared_ptr<detail::Record> record) {
  cap.pin = std::move(record);
  cap.geometry = detail::Geometry(cap.value.toTensor());
  cap.value = c10::IValue();
}

// A segment node's inputs that forward must capture (Context::captureInput):
// pinned at once when their storage has a record, else pending until it gets
// one (StageMemory::pack).
void captureInputs(const detail::Context& c, detail::MicroBatchState& f, int pos, const std::vector<c10::IValue>& inputs) {
  auto& captured = f.captures[pos];
  captured.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!c.captureInput[pos][i]) continue;
    auto& cap = captured[i];
    cap.present = true;
    cap.value = inputs[i];
    if (!inputs[i].isTensor()) continue;
    cap.requiresGrad = inputs[i].toTensor().requires_grad();
    auto* s = detail::storageOf(inputs[i].toTensor());
    auto e = s ? f.storages.find(s) : f.storages.end();
    if (e == f.storages.end() || e->second.external) continue;
    if (e->second.record) {
      pinCapture(cap, e->second.record);
    } else {
      f.pendingCaptures[s].emplace_back(pos, i);
    }
  }
}

// The plan's decisions by storage, and each recompute's segment as stage positions (checked against this stage).
void indexSegments(detail::Context& c) {
  for (size_t d = 0; d < c.plan.decisions.size(); ++d) {
    const auto& dec = c.plan.decisions[d];
    if (dec.action == TensorAction::Keep) continue;
    SLUICE_CHECK(c.decisionOf.emplace(dec.key, static_cast<int>(d)).second, PlanError,
                 "memory plan: two decisions for the storage (node " << dec.key.node << ", slot " << dec.key.slot << ")");
    if (dec.action != TensorAction::Recompute) continue;
    SLUICE_CHECK(!dec.segment.empty(), PlanError,
                 "memory plan: the recompute of node " << dec.key.node << " has an empty segment");
    for (int node : dec.segment) {
      auto it = c.positionOf.find(node);
      SLUICE_CHECK(it != c.positionOf.end(), PlanError,
                   c.stageName << ": the memory plan recomputes node " << node << ", which is not in this stage; the plan "
                               << "was made for other cuts");
      c.segmentPositions[d].push_back(it->second);
      c.inSegment[it->second] = 1;
    }
    std::sort(c.segmentPositions[d].begin(), c.segmentPositions[d].end());
  }
}

// Which inputs of segment nodes forward must capture: those some segment
// containing the node does not produce itself (Note in the header).
void markCapturedInputs(detail::Context& c, const NodeProgram& program) {
  const int n = program.numNodes();
  for (int pos = 0; pos < n; ++pos) {
    if (!c.inSegment[pos]) continue;
    auto* node = program.node(pos);
    c.randomNode[pos] = drawsRandom(node) ? 1 : 0;
    c.captureInput[pos].assign(node->inputs().size(), 0);
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      const int producer = program.producerOf(node->inputs()[i]);
      bool capture = producer < 0 || c.nodeIndex[producer] < 0;
      for (size_t d = 0; d < c.segmentPositions.size() && !capture; ++d) {
        const auto& seg = c.segmentPositions[d];
        if (std::binary_search(seg.begin(), seg.end(), pos) && !std::binary_search(seg.begin(), seg.end(), producer)) {
          capture = true;
        }
      }
      c.captureInput[pos][i] = capture ? 1 : 0;
    }
  }
}

// Facts (recordFacts): where each output of OpGraph node `node` lives, registering the storages it made.
void recordOutputFacts(detail::Context& c, const detail::MicroBatchState& f, int node,
                       const std::vector<c10::IValue>& outputs) {
  auto& facts = c.facts;
  if (facts.outputs.size() <= static_cast<size_t>(node)) {
    facts.outputs.resize(node + 1);
    facts.writesParameter.resize(node + 1, 0);
  }
  auto& outs = facts.outputs[node];
  outs.clear();
  for (auto& v : outputs) {
    ValueStorage vs;
    if (v.isTensor() && storageOf(v.toTensor())) {
      auto* s = storageOf(v.toTensor());
      auto& e = f.storages.at(s);
      if (c.paramStorages.count(s)) {
        vs.kind = ValueStorage::Parameter;
      } else if (e.external) {
        vs.kind = ValueStorage::External;
      } else {
        vs.kind = ValueStorage::Node;
        vs.key = e.key;
        auto it = c.factIndex.find(e.key);
        if (it == c.factIndex.end()) {
          it = c.factIndex.emplace(e.key, static_cast<int>(facts.storages.size())).first;
          facts.storages.push_back({e.key, static_cast<int64_t>(v.toTensor().storage().nbytes()), {}, {}});
        }
      }
    }
    outs.push_back(vs);
  }
}

// Facts (recordFacts): the storages and parameters node `node` wrote into while it ran.
void recordInPlaceWrites(detail::Context& c, const detail::MicroBatchState& f, int node,
                         const std::vector<c10::IValue>& inputs) {
  auto& facts = c.facts;
  // In-place writes: an input whose version moved while the node ran.
  std::vector<at::Tensor> tensors;
  for (auto& v : inputs) tensorsIn(v, tensors);
  for (auto& t : tensors) {
    auto* s = storageOf(t);
    for (auto& [storage, version] : f.inputVersions) {
      if (storage != s || t._version() == version) continue;
      if (c.paramStorages.count(s)) facts.writesParameter[node] = 1;
      auto e = f.storages.find(s);
      if (e != f.storages.end() && !e->second.external) {
        auto it = c.factIndex.find(e->second.key);
        if (it != c.factIndex.end()) addUnique(facts.storages[it->second].writers, node);
      }
    }
  }
}

// The entry of a storage saved while node `pos` runs; one created by the node itself is registered now.
detail::Entry& savedEntry(const detail::Context& c, detail::MicroBatchState& f, const at::Tensor& t,
                          const c10::StorageImpl* s, int pos) {
  auto found = f.storages.find(s);
  if (found != f.storages.end() && found->second.alive && found->second.alive->expired()) {
    f.storages.erase(found);  // a freed storage whose address came back: a new one
    found = f.storages.end();
  }
  if (found == f.storages.end()) {
    // Created while this node runs and saved by it: an internal tensor or its own output.
    Entry e;
    e.alive = t.storage().getWeakStorageImpl();
    e.external = c.nodeIndex[pos] < 0;
    if (!e.external) e.key = {c.nodeIndex[pos], f.nextSlot[pos]++};
    found = f.storages.emplace(s, std::move(e)).first;
  }
  return found->second;
}

}  // namespace

StageMemory::StageMemory(const NodeProgram& program, std::vector<int> nodeIndex, const std::vector<torch::Tensor>& params,
                         StageMemoryOptions options)
    : context_(std::make_shared<Context>()) {
  auto& c = *context_;
  c.program = &program;
  c.nodeIndex = std::move(nodeIndex);
  SLUICE_CHECK(static_cast<int>(c.nodeIndex.size()) == program.numNodes(), GraphError,
               "memory: " << c.nodeIndex.size() << " node indices for a program of " << program.numNodes() << " nodes");
  for (int pos = 0; pos < program.numNodes(); ++pos) {
    if (c.nodeIndex[pos] >= 0) c.positionOf[c.nodeIndex[pos]] = pos;
  }
  c.params = params;
  for (auto& p : params) {
    if (auto* s = storageOf(p)) c.paramStorages.insert(s);
  }
  c.plan = std::move(options.plan);
  c.recordFacts = options.recordFacts;
  c.stageName = options.stageName;
  c.device = options.device;
  const int n = program.numNodes();
  c.inSegment.assign(n, 0);
  c.randomNode.assign(n, 0);
  c.captureInput.assign(n, {});
  c.segmentPositions.assign(c.plan.decisions.size(), {});
  indexSegments(c);
  markCapturedInputs(c, program);
  if (c.plan.swaps()) {
    const std::string dir = options.swapDir.empty() ? defaultSwapDir() : options.swapDir;
    c.engine = options.engine ? options.engine
                              : SwapEngine::start(makeSwapTier(options.device, dir), c.plan.swapWindowBytes);
  }
}

StageMemory::~StageMemory() = default;

void StageMemory::flushSwaps() {
  if (context_->engine) context_->engine->flush();
}

bool StageMemory::active() const { return context_->plan.freesAnything() || context_->recordFacts; }

std::string StageMemory::swapDescription() const { return context_->engine ? context_->engine->describe() : ""; }

StageMemoryStats StageMemory::stats() const {
  auto s = context_->stats;
  if (context_->engine) s.swap = context_->engine->stats();
  return s;
}

const MemoryFacts& StageMemory::facts() const { return context_->facts; }

int64_t StageMemory::liveRecords() { return detail::liveRecordCount.load(); }
int64_t StageMemory::liveHandles() { return detail::liveHandleCount.load(); }

HooksFactory StageMemory::hooks() {
  return [this] { return std::make_unique<PlanHooks>(this); };
}

void StageMemory::beginForward(int microBatch, const std::vector<torch::Tensor>& boundaryInputs) {
  if (context_->engine) context_->engine->check();
  forward_ = std::make_unique<MicroBatchState>();
  forward_->microBatch = microBatch;
  if (const RandomKey* key = activeRandomKey()) forward_->random = *key;
  forward_->nextSlot.assign(context_->program->numNodes(), 0);
  for (auto& t : boundaryInputs) {
    if (auto* s = storageOf(t)) {
      Entry e;
      e.alive = t.storage().getWeakStorageImpl();
      e.external = true;
      forward_->storages[s] = std::move(e);
    }
  }
  swapOrder_.erase(microBatch);
}

void StageMemory::beforeNode(int pos, const std::vector<c10::IValue>& inputs) {
  auto& c = *context_;
  auto& f = *forward_;
  f.currentPos = pos;
  std::vector<at::Tensor> tensors;
  for (auto& v : inputs) tensorsIn(v, tensors);
  // A tensor nobody registered (a constant, a graph input) is never freed.
  for (auto& t : tensors) {
    auto* s = storageOf(t);
    if (!s || f.storages.count(s)) continue;
    Entry e;
    e.alive = t.storage().getWeakStorageImpl();
    e.external = true;
    f.storages[s] = std::move(e);
  }
  // A recompute replays a random node's draws only under the key its
  // forward ran under (Note [random streams]): there must be one.
  SLUICE_CHECK(!c.randomNode[pos] || f.random, MemoryError,
               c.stageName << ": " << c.nodeName(pos)
                           << " draws random numbers and is recomputed, but the forward runs without a random key "
                              "(RandomKeyScope); its recompute could not replay the same numbers");
  if (c.recordFacts) {
    f.inputVersions.clear();
    for (auto& t : tensors) {
      if (auto* s = storageOf(t)) f.inputVersions.emplace_back(s, t._version());
    }
  }
}

void StageMemory::afterNode(int pos, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>& outputs) {
  auto& c = *context_;
  auto& f = *forward_;
  const int node = c.nodeIndex[pos];
  for (auto& v : outputs) {
    std::vector<at::Tensor> tensors;
    tensorsIn(v, tensors);
    for (auto& t : tensors) {
      auto* s = storageOf(t);
      if (!s || f.storages.count(s)) continue;
      Entry e;
      e.alive = t.storage().getWeakStorageImpl();
      e.external = node < 0;
      if (node >= 0) e.key = {node, f.nextSlot[pos]++};
      f.storages[s] = std::move(e);
    }
  }
  if (c.inSegment[pos]) captureInputs(c, f, pos, inputs);
  if (c.recordFacts && node >= 0) {
    recordOutputFacts(c, f, node, outputs);
    recordInPlaceWrites(c, f, node, inputs);
  }
  f.currentPos = -1;
}

// The record of a storage the plan frees, made at its first save: the swap-out starts now, or it waits for its
// recompute; captures pending on the storage become pins.
void StageMemory::createRecord(Entry& entry, int decision, const at::Tensor& t, const c10::StorageImpl* s) {
  auto& c = *context_;
  auto& f = *forward_;
  auto r = std::make_shared<Record>();
  r->context = context_;
  r->key = entry.key;
  r->decision = decision;
  r->action = c.plan.decisions[r->decision].action;
  r->bytes = static_cast<int64_t>(t.storage().nbytes());
  r->registry = f.registry;
  (*f.registry)[r->key] = r;
  if (r->action == TensorAction::Swap) {
    r->slot = c.engine->swapOut(t.storage(), f.microBatch);
    c.stats.swappedBytes += r->bytes;
    swapOrder_[f.microBatch].push_back(r->slot);
  } else {
    f.recomputeRecords.push_back(r);
  }
  entry.record = std::move(r);
  // Note [captures become pins]
  auto pending = f.pendingCaptures.find(s);
  if (pending != f.pendingCaptures.end()) {
    for (auto [capPos, input] : pending->second) pinCapture(f.captures.at(capPos).at(input), entry.record);
    f.pendingCaptures.erase(pending);
  }
}

void StageMemory::pack(const at::Tensor& t, PlanHooks& hooks) {
  auto& c = *context_;
  auto* s = storageOf(t);
  const int pos = forward_ ? forward_->currentPos : -1;
  hooks.version = SavedVersion(t, pos >= 0 ? c.nodeName(pos) : std::string());
  if (!s || pos < 0 || c.paramStorages.count(s)) {
    hooks.kept = t.detach();
    return;
  }
  Entry& entry = savedEntry(c, *forward_, t, s, pos);
  if (entry.external) {
    hooks.kept = t.detach();
    return;
  }
  if (c.recordFacts) {
    auto it = c.factIndex.find(entry.key);
    if (it == c.factIndex.end()) {
      it = c.factIndex.emplace(entry.key, static_cast<int>(c.facts.storages.size())).first;
      c.facts.storages.push_back({entry.key, static_cast<int64_t>(t.storage().nbytes()), {}, {}});
    }
    addUnique(c.facts.storages[it->second].savers, c.nodeIndex[pos]);
  }
  auto decision = c.decisionOf.find(entry.key);
  if (decision == c.decisionOf.end()) {
    hooks.kept = t.detach();
    return;
  }
  if (!entry.record) createRecord(entry, decision->second, t, s);
  hooks.record = entry.record;
  hooks.geometry = detail::Geometry(t);
}

void StageMemory::endForward() {
  auto& c = *context_;
  auto& f = *forward_;
  // Every captured input on a freed storage is a pin by now (Note [captures
  // become pins]): one still pending is on a storage nothing freed.
  f.pendingCaptures.clear();
  for (auto& r : f.recomputeRecords) {
    auto seg = std::make_shared<SegmentState>();
    seg->decision = r->decision;
    seg->random = f.random;
    for (int pos : c.segmentPositions[r->decision]) {
      auto cap = f.captures.find(pos);
      if (cap != f.captures.end()) seg->captures[pos] = cap->second;
    }
    r->segment = std::move(seg);
  }
  forward_.reset();
}

void StageMemory::setTrace(TraceRecorder* trace) {
  context_->trace = trace;
  if (context_->engine) context_->engine->setTrace(trace);
}

bool StageMemory::swaps() const { return context_->engine != nullptr; }

void StageMemory::prefetch(int microBatch) {
  auto& c = *context_;
  if (!c.engine) return;
  c.engine->check();
  auto it = swapOrder_.find(microBatch);
  if (it == swapOrder_.end()) return;
  std::vector<std::shared_ptr<SwapSlot>> order;
  for (auto w = it->second.rbegin(); w != it->second.rend(); ++w) {
    if (auto slot = w->lock()) order.push_back(slot);
  }
  c.engine->prefetch(order);
}

void StageMemory::beginBackward(int microBatch) {
  context_->backwardMicroBatch = microBatch;
  prefetch(microBatch);
}

void StageMemory::endBackwardInput(int microBatch, bool weightNext) {
  auto& engine = context_->engine;
  if (!engine) return;
  engine->check();
  if (weightNext) return;
  auto it = swapOrder_.find(microBatch);
  if (it == swapOrder_.end()) return;
  for (auto& weak : it->second) {
    if (auto slot = weak.lock()) engine->evict(slot);
  }
}

void StageMemory::endBackward(int microBatch) {
  swapOrder_.erase(microBatch);
  if (context_->engine) context_->engine->check();
}

}  // namespace sluice::memory
