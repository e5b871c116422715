// The partitioner's feasibility questions (Partitioner.h): whether any split
// or one stage fits a budget, without solving the knapsacks, and the
// smallest budget that fits, found by galloping and bisection on them.
#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "partition/Partitioner.h"
#include "partition/StageSums.h"

namespace sluice::partition {
namespace detail {

namespace {

// anySplitFits on a Context of the problem, which the searches below build
// once: what a Context derives (entrants, spans, unit, holding) does not
// depend on the budget, so a search varies the budget of ctx.p in place.
bool anySplitFitsIn(const Context& ctx) {
  const Problem& p = ctx.p;
  const int n = p.numNodes(), stages = p.stages;
  std::vector<std::vector<char>> reached(stages, std::vector<char>(n + 1, 0));
  std::vector<int> active;
  for (int i = 0; i < n; ++i) {
    active.clear();
    if (i == 0) active.push_back(0);
    if (i > 0 && p.validCut[i]) {
      for (int k = 1; k < stages; ++k) {
        if (reached[k - 1][i]) active.push_back(k);
      }
    }
    auto sums = ctx.sums(i);
    for (int j = i + 1; j <= n && !active.empty(); ++j) {
      ctx.grow(sums, j - 1, nullptr);
      for (size_t a = 0; a < active.size();) {
        const int k = active[a];
        if (ctx.neverFits(sums, holdingFactor(p, k, sums.first))) {
          active.erase(active.begin() + static_cast<long>(a));
          continue;
        }
        ++a;
        if (canEnd(p, k, j) && !reached[k][j] && stageCanFit(p, sums, k, j)) reached[k][j] = 1;
      }
    }
  }
  return reached[stages - 1][n] != 0;
}

}  // namespace

// Whether some split fits the budget: optimalCuts' DP over (stage, end)
// with each stage's knapsacks replaced by stageCanFit, so true exactly when
// optimalCuts finds a plan, at a fraction of its cost.
bool anySplitFits(const Problem& p) { return anySplitFitsIn(Context(p)); }

}  // namespace detail

using namespace detail;

int64_t minimalStageBudget(const Problem& p, int stage, int first, int end) {
  Problem q = p;
  q.unitBytes = memoryUnit(p);
  q.budgetBytes = 1;  // some budget, so the stage counts its freeable units (their number does not depend on it)
  const Context ctx(q);
  auto sums = ctx.sums(first);
  for (int j = first; j < end; ++j) ctx.grow(sums, j, nullptr);
  return smallestFittingBudget(0, q.unitBytes, [&](int64_t budget) {
    q.budgetBytes = budget;
    return stageCanFit(q, sums, stage, end);
  });
}

int64_t smallestFittingBudget(int64_t below, int64_t unit, const std::function<bool(int64_t)>& fits) {
  constexpr int64_t inf = std::numeric_limits<int64_t>::max();
  int64_t lo = std::max<int64_t>(0, below);
  int64_t hi = lo + 1, step = std::max<int64_t>({1, unit, hi / 256});
  for (int tries = 0; !fits(hi); ++tries, step *= 2) {
    if (tries == 62 || hi > inf / 4) return -1;
    lo = hi;
    hi += step;
  }
  while (hi - lo > std::max<int64_t>(1, hi >> 16)) {  // to 1/65536 of the budget
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

int64_t minimalBudget(const Problem& p) {
  // A lower bound first: min over splits of the largest stage memory with
  // every freeable storage freed (unit rounding, window and chains ignored).
  const int n = p.numNodes(), stages = p.stages;
  Problem q = p;  // budget 0: excess() is the memory itself
  q.budgetBytes = 0;
  const Context ctx(q);
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> dp(stages, std::vector<int64_t>(n + 1, inf));
  for (int i = 0; i < n; ++i) {
    if (i > 0 && !p.validCut[i]) continue;
    auto sums = ctx.sums(i);
    int64_t stuck = 0;
    for (int j = i + 1; j <= n; ++j) {
      for (int x : ctx.entrants[j - 1]) {
        const auto& st = p.storages[x];
        if (st.producer < i) continue;
        if (p.swapSecondsPerByte <= 0 && recomputeSeconds(p, x, i) == kInf) stuck += st.bytes;
      }
      ctx.grow(sums, j - 1, nullptr);
      for (int k = (i == 0 ? 0 : 1); k < stages; ++k) {
        if (!canEnd(p, k, j)) continue;
        if (k > 0 && dp[k - 1][i] == inf) continue;
        if (k == 0 && i != 0) continue;
        // No window, and swapped storages W reads out of the split backward's
        // holding (Note [swapped weight reads]): a lower bound.
        const int64_t pending = i > 0 && !q.weightPendingPerStage.empty() ? q.weightPendingPerStage[k] : 0;
        const int64_t mem = sums.excess(q, k, j, Variant::Swap, stuck) - q.window() - pending * sums.weightSwappable;
        dp[k][j] = std::min(dp[k][j], std::max(k == 0 ? 0 : dp[k - 1][i], mem));
      }
    }
  }
  if (dp[stages - 1][n] == inf) return -1;
  // Then the exact (unit-rounded) model, whose feasibility is monotone in
  // the budget (Note [memory unit], CostModel.h).
  q = p;
  q.unitBytes = memoryUnit(p);
  const Context exact(q);
  return smallestFittingBudget(std::max<int64_t>(1, dp[stages - 1][n]) - 1, q.unitBytes, [&](int64_t budget) {
    q.budgetBytes = budget;
    return anySplitFitsIn(exact);
  });
}

}  // namespace sluice::partition
