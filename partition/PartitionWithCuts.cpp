// partitionWithCuts (Partitioner.h): the best memory actions for given cuts,
// or a PlanError naming the budget those cuts need.
#include <algorithm>
#include <sstream>

#include "core/Bytes.h"
#include "core/Error.h"
#include "partition/Partitioner.h"

namespace sluice::partition {

const StageCost& StageMemo::get(const Problem& problem, int stage, int first, int end) {
  const std::array<int, 3> key{stage, first, end};
  auto it = stages_.find(key);
  if (it == stages_.end()) it = stages_.emplace(key, bestStage(problem, stage, first, end)).first;
  return it->second;
}

Partition partitionWithCuts(const Problem& p, const std::vector<int>& cuts, StageMemo* memo) {
  p.validate();
  SLUICE_CHECK(static_cast<int>(cuts.size()) == p.stages - 1, PlanError,
               "partition: " << p.stages << " stages need " << p.stages - 1 << " cuts, got " << cuts.size());
  Partition out;
  out.cuts = cuts;
  for (int k = 0; k < p.stages; ++k) {
    const int first = k == 0 ? 0 : cuts[k - 1], end = k + 1 == p.stages ? p.numNodes() : cuts[k];
    SLUICE_CHECK(first < end && (k == 0 || p.validCut[first]), PlanError,
                 "partition: cut " << first << " is out of order or not a valid cut");
    auto s = memo ? memo->get(p, k, first, end) : bestStage(p, k, first, end);
    if (!s.fits) {
      if (!p.nameSmallestBudget) {
        throw PlanError("partition: stage " + std::to_string(k) + " does not fit the budget");  // (nobody reads it)
      }
      // The budget these cuts need: the largest of their stages' minimums.
      int64_t need = 0;
      for (int j = 0; j < p.stages && need >= 0; ++j) {
        const int a = j == 0 ? 0 : cuts[j - 1], b = j + 1 == p.stages ? p.numNodes() : cuts[j];
        const int64_t n = minimalStageBudget(p, j, a, b);
        need = n < 0 ? -1 : std::max(need, n);
      }
      std::ostringstream os;
      const int shares = std::max(1, p.budgetShares);  // stages per rank: name the rank's budget
      os << "partition: stage " << k << " (nodes [" << first << ", " << end << ")) does not fit the budget of "
         << formatBytesExact(p.budgetBytes) << (shares > 1 ? " (its share of the rank's)" : "");
      if (need > 0) {
        os << "; with these cuts the smallest budget that fits is " << budgetAdvice(need, shares)
           << ", or use other cuts or more stages";
      } else {
        os << " with any keep/swap/recompute choice: use other cuts or more stages";
      }
      throw PlanError(os.str());
    }
    out.stages.push_back(std::move(s));
  }
  out.stepTime = stepTime(out.stages, p.microBatches);
  return out;
}

}  // namespace sluice::partition
