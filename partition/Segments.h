// partition::savedStorages: the storages a graph saves for backward, with
// what recomputing each one re-runs (its segment).
//
// From a profile's MemoryFacts: every storage some node saves, with its
// producer, first saver and bytes. Its segment starts with the producer and
// the nodes that wrote into the storage in place before it was saved, then
// closes over inputs: an input that lives on a saved storage, a parameter, a
// data input or a constant is available at recompute time (captured in
// forward, or itself rebuilt), so it stops there; any other input (nothing
// saved it, so nothing keeps it) is rebuilt too: its producer and that
// storage's in-place writers join the segment. A stage that starts later
// re-runs only the segment's nodes inside it (earlier values arrive as the
// stage's boundary inputs). lastParamWriter is the last segment node that
// writes a parameter or buffer in place (recompute is refused where it is
// inside the stage).
#pragma once

#include <vector>

#include "core/OpGraph.h"
#include "memory/MemoryFacts.h"
#include "partition/CostModel.h"

namespace sluice::partition {

std::vector<SavedStorage> savedStorages(const OpGraph& graph, const memory::MemoryFacts& facts);

}  // namespace sluice::partition
