// Internals of StageMemory (not a public header): the shared context, the
// record of one freed storage, the saved-tensor hooks that refer to it, and a
// recompute segment's captured inputs.
#pragma once

#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <atomic>
#include <map>
#include <optional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/NodeProgram.h"
#include "core/RandomStream.h"
#include "core/Trace.h"
#include "memory/MemoryFacts.h"
#include "memory/MemoryPlan.h"
#include "memory/SavedTensorHooks.h"
#include "memory/StageMemory.h"
#include "memory/SwapEngine.h"

namespace sluice::memory::detail {

extern std::atomic<int64_t> liveRecordCount, liveHandleCount;

// What the forward saw of a tensor, to rebuild the same view of its storage.
struct Geometry {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::kFloat;
  explicit Geometry(const at::Tensor& t = at::Tensor());
  at::Tensor viewOf(const c10::Storage& storage) const;
};

struct Context {
  const NodeProgram* program = nullptr;
  std::vector<int> nodeIndex;               // position -> OpGraph index (-1: none)
  std::unordered_map<int, int> positionOf;  // OpGraph index -> position
  std::vector<at::Tensor> params;
  std::unordered_set<const c10::StorageImpl*> paramStorages;
  MemoryPlan plan;
  std::map<StorageKey, int> decisionOf;           // key -> index into plan.decisions
  std::vector<std::vector<int>> segmentPositions;  // per decision (recompute): positions, ascending
  std::vector<char> inSegment;                     // per position
  std::vector<std::vector<char>> captureInput;     // per position, per input
  std::vector<char> randomNode;                    // per position: draws random numbers and in some segment
  std::shared_ptr<SwapEngine> engine;
  StageMemoryStats stats;
  bool recordFacts = false;
  MemoryFacts facts;
  std::map<StorageKey, int> factIndex;
  std::string stageName;
  c10::Device device = c10::Device(c10::kCPU);  // the stage's: a recompute seeds its generator (RandomKeyScope)
  TraceRecorder* trace = nullptr;  // recomputes as trace events (StageMemory::setTrace)
  int backwardMicroBatch = -1;     // the micro-batch in backward (trace events)

  std::string nodeName(int pos) const;  // "aten::gelu (node 37)"
};

struct Record;

// A captured input of a recompute segment: a value, or a reference to the
// record of the storage it lives on (a pin) with the view to rebuild.
struct Captured {
  bool present = false;  // this input was captured (else another segment node makes it)
  c10::IValue value;
  bool requiresGrad = false;
  std::shared_ptr<Record> pin;
  Geometry geometry;
};

struct SegmentState {
  int decision = -1;
  std::unordered_map<int, std::vector<Captured>> captures;  // position -> per input (unset: not captured)
  std::optional<RandomKey> random;  // the key its forward ran under (Note [random streams])
};

// The records of one micro-batch by key, so that one recompute can fill the
// records of every storage its producer rebuilds.
using Registry = std::map<StorageKey, std::weak_ptr<Record>>;

struct Record {
  std::shared_ptr<Context> context;
  StorageKey key;
  TensorAction action = TensorAction::Keep;
  int decision = -1;
  int64_t bytes = 0;
  std::shared_ptr<SwapSlot> slot;           // swap
  std::shared_ptr<SegmentState> segment;    // recompute, until it ran
  std::shared_ptr<Registry> registry;
  c10::Storage rebuilt;                     // recompute: the storage it produced

  Record();
  ~Record();
  // The storage's bytes, in memory (swapped in, or recomputed).
  c10::Storage storage();
};

// Re-runs the segment of `record` and fills every record it rebuilds.
void recompute(Record& record);

class PlanHooks : public torch::autograd::SavedVariableHooks {
 public:
  explicit PlanHooks(StageMemory* owner);
  ~PlanHooks() override;
  void call_pack_hook(const at::Tensor& tensor) override;
  at::Tensor call_unpack_hook() override;

  at::Tensor kept;
  std::shared_ptr<Record> record;
  Geometry geometry;
  SavedVersion version;

 private:
  StageMemory* owner_;
};

struct Entry {
  // Keeps the StorageImpl object (not its memory) so that its address is not
  // reused while this micro-batch's forward runs.
  std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> alive;
  StorageKey key;
  bool external = false;  // a parameter, boundary input, constant: always kept
  std::shared_ptr<Record> record;
};

struct MicroBatchState {
  int microBatch = 0;
  int currentPos = -1;
  std::vector<int> nextSlot;
  std::unordered_map<const c10::StorageImpl*, Entry> storages;
  std::unordered_map<int, std::vector<Captured>> captures;
  // Captured inputs still held as values, by storage: each becomes a pin
  // once its storage gets a record (Note [captures become pins]).
  std::unordered_map<const c10::StorageImpl*, std::vector<std::pair<int, size_t>>> pendingCaptures;
  std::optional<RandomKey> random;  // the active key at beginForward
  std::vector<std::shared_ptr<Record>> recomputeRecords;
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  std::vector<std::pair<const c10::StorageImpl*, uint32_t>> inputVersions;  // facts: before the node
};

// Storage of a tensor, or nullptr when it has none.
const c10::StorageImpl* storageOf(const at::Tensor& t);

}  // namespace sluice::memory::detail
