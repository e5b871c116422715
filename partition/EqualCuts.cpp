#include "partition/EqualCuts.h"

#include <cstdlib>

#include "core/Error.h"

namespace sluice::partition {

std::vector<int> equalNodeCuts(const OpGraph& graph, int stages) {
  auto valid = graph.validCuts();
  SLUICE_CHECK(static_cast<int>(valid.size()) >= stages - 1, GraphError,
               "the graph has " << valid.size() << " valid cut points, too few for " << stages << " stages");
  std::vector<int> cuts;
  size_t from = 0;  // first candidate index still available
  for (int k = 1; k < stages; ++k) {
    const double target = static_cast<double>(k) * graph.numNodes() / stages;
    // Leave enough candidates for the remaining cuts.
    const size_t last = valid.size() - static_cast<size_t>(stages - 1 - k) - 1;
    size_t best = from;
    for (size_t i = from; i <= last; ++i) {
      if (std::abs(valid[i] - target) < std::abs(valid[best] - target)) best = i;
    }
    cuts.push_back(valid[best]);
    from = best + 1;
  }
  return cuts;
}

}  // namespace sluice::partition
