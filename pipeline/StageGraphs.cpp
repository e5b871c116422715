#include "pipeline/StageGraphs.h"

#include <algorithm>

#include "core/Error.h"

namespace sluice::pipeline {

int SlotPool::acquire(int microBatch) {
  SLUICE_CHECK(slotOf(microBatch) < 0, GraphError,
               "micro-batch " << microBatch << " already holds graph slot " << slotOf(microBatch));
  auto free = std::find(holder_.begin(), holder_.end(), -1);
  if (free == holder_.end()) free = holder_.insert(holder_.end(), -1);
  *free = microBatch;
  return static_cast<int>(free - holder_.begin());
}

void SlotPool::release(int microBatch) {
  const int slot = slotOf(microBatch);
  SLUICE_CHECK(slot >= 0, GraphError, "micro-batch " << microBatch << " holds no graph slot");
  holder_[slot] = -1;
}

int SlotPool::slotOf(int microBatch) const {
  auto it = std::find(holder_.begin(), holder_.end(), microBatch);
  return it == holder_.end() ? -1 : static_cast<int>(it - holder_.begin());
}

int SlotPool::held() const { return static_cast<int>(std::count_if(holder_.begin(), holder_.end(), [](int h) { return h >= 0; })); }

}  // namespace sluice::pipeline
