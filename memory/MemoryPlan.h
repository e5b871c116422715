// memory::MemoryPlan: what a stage does with the tensors autograd saves.
//
// Note [storage keys]: a saved tensor is attributed to the storage it lives
// on, and a storage to the node that created it: its producer. A storage's
// key is (producer, slot), where producer is the OpGraph node index and slot
// numbers the storages that node created in the order they were first seen
// while it ran: first those saved during the node (its internal tensors, such
// as layer_norm's mean and rstd, or its own output when it saves that), then
// its outputs in order. The profiler and the stage worker run the same
// attribution code (StageMemory), so a plan made from a profile names the
// storages training sees.
//
// A decision applies to every tensor saved on that storage, by any node, so a
// storage is freed only when all its savers free it. Parameters, the stage's
// boundary inputs and anything not named here are kept.
//   swap       written to the swap tier as soon as it is saved (after forward
//              no longer needs it the memory is released), read back before
//              the backward that needs it (prefetched);
//   recompute  dropped; on the first backward read it is rebuilt by re-running
//              `segment` (the producer, the in-place writers of its storage,
//              and the producers of any input nothing saved), in order, under
//              the random key of its forward (Note [random streams]), so
//              random nodes draw the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/Choice.h"

namespace sluice::memory {

// memory.policy: who decides what each saved storage does: the partitioner
// (plan: keep, swap or recompute each, under memory.budget_mb), nobody (none:
// keep everything), or a fixed rule (full_recompute: every storage inside a
// transformer block except its output is recomputed).
enum class MemoryPolicy { Plan, None, FullRecompute };
const std::vector<Choice<MemoryPolicy>>& memoryPolicies();  // plan | none | full_recompute

enum class TensorAction { Keep = 0, Swap = 1, Recompute = 2 };
const char* actionName(TensorAction action);

struct StorageKey {
  int node = -1;  // OpGraph index of the producer
  int slot = 0;
  bool operator==(const StorageKey& o) const { return node == o.node && slot == o.slot; }
  bool operator<(const StorageKey& o) const { return node != o.node ? node < o.node : slot < o.slot; }
};

struct StorageDecision {
  StorageKey key;
  TensorAction action = TensorAction::Keep;
  std::vector<int> segment;  // recompute: OpGraph node indices to re-run, ascending
  int64_t bytes = 0;         // what the plan expects (for reports)
};

struct MemoryPlan {
  std::vector<StorageDecision> decisions;
  // Swap: bytes written but not yet on the tier, and bytes read back ahead of
  // their backward, each at most this much (0: one storage at a time).
  int64_t swapWindowBytes = 64ll << 20;
  bool freesAnything() const;
  bool swaps() const;
  const StorageDecision* find(const StorageKey& key) const;
};

}  // namespace sluice::memory
