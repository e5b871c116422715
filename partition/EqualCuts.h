// The simple split of the walking skeleton: stages with (about) equal numbers
// of nodes, each cut moved to the nearest valid cut (see OpGraph::isValidCut).
// The profiler-driven partitioner replaces this as the default later.
#pragma once

#include <vector>

#include "core/OpGraph.h"

namespace sluice::partition {

// Returns stages - 1 increasing valid cuts; throws GraphError when the graph
// has too few valid cuts for that many stages.
std::vector<int> equalNodeCuts(const OpGraph& graph, int stages);

}  // namespace sluice::partition
