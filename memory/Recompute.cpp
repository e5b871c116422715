// StageMemory internals: records of freed storages, the hooks that read them
// back, and recompute (re-running a segment of the stage's nodes).
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <unordered_set>

#include "core/Tensors.h"
#include "core/Error.h"
#include "core/Capture.h"
#include "core/OpGraph.h"
#include "core/RandomStream.h"
#include "memory/SavedRecord.h"

namespace sluice::memory::detail {

std::atomic<int64_t> liveRecordCount{0}, liveHandleCount{0};

const c10::StorageImpl* storageOf(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  return t.storage().unsafeGetStorageImpl();
}

std::string Context::nodeName(int pos) const {
  std::string name = program->node(pos)->kind().toQualString();
  if (nodeIndex[pos] >= 0) name += " (node " + std::to_string(nodeIndex[pos]) + ")";
  return name;
}

Geometry::Geometry(const at::Tensor& t) {
  if (!t.defined()) return;
  sizes = t.sizes().vec();
  strides = t.strides().vec();
  offset = t.storage_offset();
  dtype = t.scalar_type();
}

at::Tensor Geometry::viewOf(const c10::Storage& storage) const {
  at::NoGradGuard noGrad;
  // On the storage's device: set_ refuses a storage from another device.
  return at::empty({0}, at::TensorOptions().dtype(dtype).device(storage.device())).set_(storage, offset, sizes, strides);
}

Record::Record() { ++liveRecordCount; }

Record::~Record() {
  if (slot) {
    if (auto engine = context ? context->engine : nullptr) engine->release(*slot);
  }
  --liveRecordCount;
}

c10::Storage Record::storage() {
  if (action == TensorAction::Swap) return context->engine->swapIn(*slot);
  if (!rebuilt.unsafeGetStorageImpl()) recompute(*this);
  SLUICE_CHECK(rebuilt.unsafeGetStorageImpl(), MemoryError,
               context->stageName << ": recomputing node " << key.node << " did not rebuild its storage (slot " << key.slot
                                  << "); the plan does not match this stage's graph (internal error)");
  return rebuilt;
}

PlanHooks::PlanHooks(StageMemory* owner) : owner_(owner) { ++liveHandleCount; }

PlanHooks::~PlanHooks() { --liveHandleCount; }

void PlanHooks::call_pack_hook(const at::Tensor& tensor) { owner_->pack(tensor, *this); }

at::Tensor PlanHooks::call_unpack_hook() {
  version.check();
  if (!record) return kept;
  return geometry.viewOf(record->storage());
}

namespace {

using Clock = std::chrono::steady_clock;

// Collects what autograd saves while one node of a replay runs, in order.
class CollectingHooks : public torch::autograd::SavedVariableHooks {
 public:
  explicit CollectingHooks(std::vector<at::Tensor>* sink) : sink_(sink) {}
  void call_pack_hook(const at::Tensor& tensor) override {
    kept_ = tensor.detach();
    sink_->push_back(kept_);
  }
  at::Tensor call_unpack_hook() override { return kept_; }

 private:
  std::vector<at::Tensor>* sink_;
  at::Tensor kept_;
};

// A captured input as the replay must see it: a separate leaf with the
// forward's requires_grad (so the replay records the same saved tensors
// without touching the real graph), copied if the node writes into it.
c10::IValue replayInput(const Captured& cap, bool writtenInPlace) {
  at::Tensor t;
  if (cap.pin) {
    t = cap.geometry.viewOf(cap.pin->storage());
  } else if (cap.value.isTensor()) {
    t = cap.value.toTensor();
  } else {
    return cap.value;
  }
  t = t.detach();
  if (writtenInPlace) t = t.clone();
  if (cap.requiresGrad && t.is_floating_point()) t.requires_grad_(true);
  return t;
}

bool writesInput(const torch::jit::Node* node, size_t input) {
  const auto* schema = node->maybeSchema();
  if (!schema || input >= schema->arguments().size()) return false;
  const auto* alias = schema->arguments()[input].alias_info();
  return alias && alias->isWrite();
}

}  // namespace

// Note [recompute groups]: the segments of storages still waiting to be
// rebuilt that share a node with this one (directly or through each other)
// re-run together, each node once, as Megatron's full recompute re-runs a
// whole block: the group's storages are all rebuilt now and held until their
// backward uses them (the cost model's spans account for that).
namespace {

// The group a recompute re-runs: the target's segment and every pending
// segment that shares a node with it, transitively (Note [recompute groups]).
struct RecomputeGroup {
  std::vector<std::shared_ptr<SegmentState>> states;
  std::vector<Record*> members;
  std::set<int> positions;
};

RecomputeGroup recomputeGroup(Record& target) {
  auto& c = *target.context;
  RecomputeGroup out;
  auto& states = out.states;
  auto& members = out.members;
  auto& group = out.positions;
  states.push_back(target.segment);
  const auto& own = c.segmentPositions[target.segment->decision];
  group.insert(own.begin(), own.end());
  members.push_back(&target);
  for (bool grew = true; grew;) {
    grew = false;
    for (auto& [key, weak] : *target.registry) {
      auto r = weak.lock();
      if (!r || r->action != TensorAction::Recompute || !r->segment || r->rebuilt.unsafeGetStorageImpl() ||
          std::find(members.begin(), members.end(), r.get()) != members.end()) {
        continue;
      }
      const auto& seg = c.segmentPositions[r->segment->decision];
      if (std::none_of(seg.begin(), seg.end(), [&](int pos) { return group.count(pos) > 0; })) continue;
      members.push_back(r.get());
      states.push_back(r->segment);
      group.insert(seg.begin(), seg.end());
      grew = true;
    }
  }
  return out;
}

// The nodes that made a storage still waiting to be rebuilt (they replay
// under grad mode, Note [lean replay]).
std::unordered_set<int> pendingTargets(const Record& target) {
  std::unordered_set<int> targets;
  for (auto& [key, weak] : *target.registry) {
    auto r = weak.lock();
    if (r && r->action == TensorAction::Recompute && !r->rebuilt.unsafeGetStorageImpl()) targets.insert(key.node);
  }
  return targets;
}

// Position -> index in positions of its last reader inside the group.
std::unordered_map<int, size_t> lastReads(const Context& c, const std::vector<int>& positions,
                                          const std::unordered_set<int>& inGroup) {
  std::unordered_map<int, size_t> lastRead;  // position -> index in positions of its last reader
  for (size_t x = 0; x < positions.size(); ++x) {
    for (auto* in : c.program->node(positions[x])->inputs()) {
      const int producer = c.program->producerOf(in);
      if (producer >= 0 && inGroup.count(producer)) lastRead[producer] = x;
    }
  }
  return lastRead;
}

// Note [buffers in a replay]: forward already updated the buffers the
// group writes (BatchNorm's running statistics through aten::batch_norm,
// its batch counter through aten::add_); the replay must leave them as
// forward left them (values and version counters), so the stage's buffers
// are put back afterwards (KeepBuffers: values and version counters). The
// replayed batch_norm normalises with the micro-batch's own statistics, so
// the rebuilt tensors are unaffected.
void keepGroupBuffers(const Context& c, const std::vector<int>& positions, std::optional<KeepBuffers>& keepBuffers) {
  static const auto batchNorm = c10::Symbol::fromQualString("aten::batch_norm");
  static const auto addInPlace = c10::Symbol::fromQualString("aten::add_");
  const bool writesBuffers = std::any_of(positions.begin(), positions.end(), [&](int pos) {
    const auto kind = c.program->node(pos)->kind();
    return kind == batchNorm || kind == addInPlace;
  });
  if (!writesBuffers) return;
  std::vector<torch::Tensor> buffers;
  for (auto& p : c.params) {
    if (!p.requires_grad()) buffers.push_back(p);
  }
  keepBuffers.emplace(buffers);
}

// A group node's inputs for its replay: earlier group nodes' outputs (leaves
// with the traced requires_grad where the node is a target), else what
// forward captured.
template <class CapturedInput>
std::vector<c10::IValue> replayStack(const Context& c, int pos, bool isTarget,
                                     const std::unordered_map<int, std::vector<c10::IValue>>& env,
                                     const std::unordered_set<int>& inGroup, const CapturedInput& capturedInput) {
  auto* node = c.program->node(pos);
  std::vector<c10::IValue> stack;
  for (size_t i = 0; i < node->inputs().size(); ++i) {
    const auto* v = node->inputs()[i];
    const int producer = c.program->producerOf(v);
    if (producer >= 0 && inGroup.count(producer)) {
      size_t out = 0;
      while (c.program->node(producer)->output(out) != v) ++out;
      c10::IValue value = env.at(producer).at(out);
      if (isTarget && value.isTensor() && !writesInput(node, i)) {
        auto t = value.toTensor().detach();
        auto type = v->type()->cast<c10::TensorType>();
        if (type && type->requiresGrad().value_or(false) && t.is_floating_point()) t.requires_grad_(true);
        value = t;
      }
      stack.push_back(std::move(value));
      continue;
    }
    const Captured* cap = capturedInput(pos, i);
    SLUICE_CHECK(cap, MemoryError,
                 c.stageName << ": recompute of " << c.nodeName(pos) << " lacks captured input " << i
                             << " (internal error)");
    stack.push_back(replayInput(*cap, writesInput(node, i)));
  }
  return stack;
}

// The storages a target node created in the replay, numbered as forward
// numbered them (Note [storage keys]): saved ones in save order, then its
// outputs; each one a record waits for becomes that record's rebuilt storage.
void adoptRebuilt(Record& target, int pos, std::vector<c10::IValue>& stack, std::vector<at::Tensor>& packed,
                  std::unordered_set<const c10::StorageImpl*>& knownStorages) {
  auto& c = *target.context;
  const int nodeIndex = c.nodeIndex[pos];
  int slot = 0;
  std::vector<at::Tensor> outputs;
  for (auto& v : stack) tensorsIn(v, outputs);
  for (auto* list : {&packed, &outputs}) {
    for (auto& t : *list) {
      auto* s = storageOf(t);
      if (!s || !knownStorages.insert(s).second) continue;
      auto it = target.registry->find(StorageKey{nodeIndex, slot++});
      if (it == target.registry->end()) continue;
      auto r = it->second.lock();
      if (!r || r->action != TensorAction::Recompute || r->rebuilt.unsafeGetStorageImpl()) continue;
      SLUICE_CHECK(static_cast<int64_t>(t.storage().nbytes()) == r->bytes, MemoryError,
                   c.stageName << ": recomputing " << c.nodeName(pos) << " gave " << t.storage().nbytes()
                               << " bytes for slot " << r->key.slot << ", forward had " << r->bytes);
      r->rebuilt = t.storage();
      c.stats.recomputedBytes += r->bytes;
    }
  }
}

// Replays group node positions[x] (Note [lean replay]): a target under grad mode, collecting what autograd saves
// so that its new storages become the waiting records' rebuilt ones; any other node without autograd. Its outputs
// join `env`, and the values no later group node reads leave it.
template <class CapturedInput>
void replayNode(Record& target, const std::vector<int>& positions, size_t x, bool isTarget,
                const std::unordered_set<int>& inGroup, const std::unordered_map<int, size_t>& lastRead,
                const CapturedInput& capturedInput, std::unordered_map<int, std::vector<c10::IValue>>& env) {
  auto& c = *target.context;
  const int pos = positions[x];
  auto stack = replayStack(c, pos, isTarget, env, inGroup, capturedInput);
  // Storages the node did not create: its inputs'.
  std::vector<at::Tensor> known;
  for (auto& v : stack) tensorsIn(v, known);
  std::unordered_set<const c10::StorageImpl*> knownStorages;
  for (auto& t : known) knownStorages.insert(storageOf(t));
  std::vector<at::Tensor> packed;
  if (isTarget) {
    torch::AutoGradMode gradMode(true);
    SavedTensorScope scope([&packed] { return std::make_unique<CollectingHooks>(&packed); });
    c.program->runNode(pos, stack);
  } else {
    torch::NoGradGuard noGrad;
    c.program->runNode(pos, stack);
  }
  if (isTarget) adoptRebuilt(target, pos, stack, packed, knownStorages);
  env[pos] = std::move(stack);
  // Values no later group node reads go now.
  for (auto it = env.begin(); it != env.end();) {
    auto last = lastRead.find(it->first);
    if (last == lastRead.end() || last->second <= x) {
      it = env.erase(it);
    } else {
      ++it;
    }
  }
}

// The replay on the timeline, nested in the backward that asked for it.
void traceRecompute(const Context& c, const TraceRecorder::Mark& mark, const std::vector<int>& positions) {
  const auto more = positions.size() - 1;
  c.trace->add(mark,
               "recompute " + c.nodeName(positions.front()) +
                   (more ? " and " + std::to_string(more) + " more node" + (more > 1 ? "s" : "") : std::string()),
               "compute", c.backwardMicroBatch, "recompute");
}

}  // namespace

void recompute(Record& target) {
  auto& c = *target.context;
  SLUICE_CHECK(target.segment, MemoryError,
               c.stageName << ": storage of node " << target.key.node << " was freed for recompute but its segment is "
                           << "gone (internal error)");
  const auto t0 = Clock::now();
  const auto mark = c.trace ? c.trace->current() : TraceRecorder::Mark{};
  auto grouped = recomputeGroup(target);
  auto& states = grouped.states;
  auto& members = grouped.members;
  const auto& group = grouped.positions;
  const std::vector<int> positions(group.begin(), group.end());
  const std::unordered_set<int> inGroup(positions.begin(), positions.end());
  auto capturedInput = [&](int pos, size_t i) -> const Captured* {
    for (auto& st : states) {
      auto it = st->captures.find(pos);
      if (it != st->captures.end() && i < it->second.size() && it->second[i].present) return &it->second[i];
    }
    return nullptr;
  };
  // Random nodes replay their forward's draws: the same key (Note [random streams]).
  std::optional<RandomKey> random;
  for (auto& st : states) {
    if (st->random) random = st->random;
  }
  std::optional<RandomKeyScope> randomScope;
  if (random) randomScope.emplace(*random, c.device);
  // Note [lean replay]: only nodes that made a storage waiting to be rebuilt
  // run under grad mode (so autograd saves exactly what forward saved, and
  // the slots match); their inputs from earlier group nodes become leaves
  // with the requires_grad the trace recorded. Every other node runs without
  // autograd, and a value is dropped after its last reader in the group, so
  // the replay holds little beyond what it rebuilds.
  const auto targets = pendingTargets(target);
  const auto lastRead = lastReads(c, positions, inGroup);
  std::optional<KeepBuffers> keepBuffers;
  keepGroupBuffers(c, positions, keepBuffers);  // Note [buffers in a replay]
  std::unordered_map<int, std::vector<c10::IValue>> env;  // position -> outputs
  for (size_t x = 0; x < positions.size(); ++x) {
    const bool isTarget = targets.count(c.nodeIndex[positions[x]]) > 0;
    replayNode(target, positions, x, isTarget, inGroup, lastRead, capturedInput, env);
  }
  keepBuffers.reset();  // autograd saved running_mean/var and checks their versions at unpack
  // Rebuilt: the captured inputs (and the records they pin) can go.
  for (auto& st : states) st->captures.clear();
  for (auto* r : members) r->segment.reset();
  ++c.stats.recomputes;
  if (c.trace && mark.active) traceRecompute(c, mark, positions);
  c.stats.recomputeSeconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace sluice::memory::detail
