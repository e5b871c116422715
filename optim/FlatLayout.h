// optim::FlatLayout: how DistAdam lays its parameters out in flat buckets.
//
// Parameters go into buckets in reverse order (the order backward finishes
// their gradients, so a bucket of the last layers is complete first), each
// bucket filled until the next parameter would take it past the cap (a
// parameter larger than the cap gets a bucket of its own), as DDP's reducer
// does. A bucket's flat buffer holds its parameters back to back, padded to
// a multiple of the rank count; rank r owns elements [r * shard, (r + 1) *
// shard) of it. One reduce-scatter and one all-gather per bucket replace one
// per parameter, and the AdamW update runs on the owned range at once.
//
// Pure and deterministic: every rank computes the same layout from the same
// element counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::optim {

// A piece of a rank's shard that belongs to one parameter.
struct FlatSegment {
  size_t param = 0;        // index into the parameter list
  int64_t paramBegin = 0;  // first element, in the flattened parameter
  int64_t shardBegin = 0;  // where it sits in the rank's shard
  int64_t length = 0;
};

struct FlatBucket {
  std::vector<size_t> params;     // parameter indices, in bucket order
  std::vector<int64_t> offsets;   // each one's first element in the flat buffer
  int64_t numel = 0;              // elements of its parameters together
  int64_t shard = 0;              // elements per rank: ceil(numel / ranks)
  std::vector<FlatSegment> owned; // this rank's shard, parameter by parameter (padding left out)
};

// numels: element count of each parameter; bucketElements >= 1: the cap.
std::vector<FlatBucket> layoutBuckets(const std::vector<int64_t>& numels, int64_t bucketElements, int ranks, int rank);

}  // namespace sluice::optim
