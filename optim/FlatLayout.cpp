#include "optim/FlatLayout.h"

#include <algorithm>

#include "core/Error.h"

namespace sluice::optim {

std::vector<FlatBucket> layoutBuckets(const std::vector<int64_t>& numels, int64_t bucketElements, int ranks, int rank) {
  SLUICE_CHECK(bucketElements >= 1, OptimError, "DistAdam bucket size must be at least one element, got " << bucketElements);
  SLUICE_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, OptimError, "DistAdam: rank " << rank << " of " << ranks);
  std::vector<FlatBucket> buckets;
  for (size_t k = numels.size(); k-- > 0;) {
    if (buckets.empty() || (buckets.back().numel > 0 && buckets.back().numel + numels[k] > bucketElements)) {
      buckets.emplace_back();
    }
    auto& b = buckets.back();
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += numels[k];
  }
  for (auto& b : buckets) {
    b.shard = (b.numel + ranks - 1) / ranks;
    const int64_t lo = rank * b.shard, hi = std::min(b.numel, lo + b.shard);
    for (size_t i = 0; i < b.params.size(); ++i) {
      const int64_t begin = std::max(lo, b.offsets[i]), end = std::min(hi, b.offsets[i] + numels[b.params[i]]);
      if (begin < end) b.owned.push_back({b.params[i], begin - b.offsets[i], begin - lo, end - begin});
    }
  }
  return buckets;
}

}  // namespace sluice::optim
