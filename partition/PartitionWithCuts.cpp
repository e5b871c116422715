// partitionWithCuts (Partitioner.h): the best memory actions for given cuts,
// or a PlanError naming the budget those cuts need.
#include <algorithm>
#include <sstream>

#include "core/Bytes.h"
#include "core/Error.h"
#include "partition/Partitioner.h"

namespace sluice::partition {
namespace {

// The smallest budget (to 1/4096) under which bestStage fits stage `stage`
// of [first, end); -1 when none up to keeping everything does. Not the peak
// with everything freed: recomputing everything can need more than swapping
// part, so that is no minimum.
int64_t minimalStageBudget(const Problem& p, int stage, int first, int end) {
  Problem q = p;
  q.budgetBytes = std::max<int64_t>(1, evaluateStage(p, stage, first, end, {}).peakBytes);
  if (!bestStage(q, stage, first, end).fits) return -1;
  int64_t lo = 0, hi = q.budgetBytes;  // lo does not fit (0 would mean no budget), hi does
  while (hi - lo > std::max<int64_t>(1, hi / 4096)) {
    q.budgetBytes = lo + (hi - lo) / 2;
    (bestStage(q, stage, first, end).fits ? hi : lo) = q.budgetBytes;
  }
  return hi;
}

}  // namespace

Partition partitionWithCuts(const Problem& p, const std::vector<int>& cuts) {
  p.validate();
  SLUICE_CHECK(static_cast<int>(cuts.size()) == p.stages - 1, PlanError,
               "partition: " << p.stages << " stages need " << p.stages - 1 << " cuts, got " << cuts.size());
  Partition out;
  out.cuts = cuts;
  for (int k = 0; k < p.stages; ++k) {
    const int first = k == 0 ? 0 : cuts[k - 1], end = k + 1 == p.stages ? p.numNodes() : cuts[k];
    SLUICE_CHECK(first < end && (k == 0 || p.validCut[first]), PlanError,
                 "partition: cut " << first << " is out of order or not a valid cut");
    auto s = bestStage(p, k, first, end);
    if (!s.fits) {
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
        os << "; with these cuts the stages need at least " << budgetAdvice(need, shares)
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
