// memory::MemoryFacts: what one instrumented forward learned about storages.
//
// StageMemory records these when asked (the profiler runs the whole graph
// once that way): every storage a node created that autograd saved or that a
// node output lives on, who saved it and who wrote into it in place. Keys
// follow Note [storage keys] in MemoryPlan.h. Node indices are OpGraph
// indices. The partitioner derives from these facts which bytes a stage
// holds, which it can free, and what recomputing a storage re-runs.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/MemoryPlan.h"

namespace sluice::memory {

struct StorageFact {
  StorageKey key;
  int64_t bytes = 0;
  std::vector<int> savers;   // nodes that saved a tensor on it, ascending, unique
  std::vector<int> writers;  // nodes that modified it in place, ascending, unique
};

// Where a node output lives.
struct ValueStorage {
  enum Kind { NotTensor = 0, Node = 1, Parameter = 2, Data = 3, External = 4 };
  Kind kind = NotTensor;
  StorageKey key;  // kind == Node
};

struct MemoryFacts {
  std::vector<StorageFact> storages;
  std::vector<std::vector<ValueStorage>> outputs;  // [node][output]
  std::vector<char> writesParameter;               // [node]: modifies a parameter or buffer in place (e.g. BatchNorm statistics)
  // Index into `storages`, or -1.
  int find(const StorageKey& key) const;
};

}  // namespace sluice::memory
