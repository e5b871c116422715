#include "partition/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "core/Bytes.h"
#include "core/Error.h"
#include "core/GraphSplit.h"
#include "partition/PlanBuild.h"
#include "partition/Refill.h"
#include "partition/Segments.h"
#include "pipeline/ScheduleSimulation.h"

namespace sluice::partition {

std::vector<int> Plan::cuts() const {
  std::vector<int> out;
  for (size_t k = 1; k < stages.size(); ++k) out.push_back(stages[k].firstNode);
  return out;
}

std::optional<pipeline::ScheduleCosts> Plan::scheduleCosts() const {
  pipeline::ScheduleCosts costs;
  costs.comm = scheduleComm;
  bool any = false;
  for (auto& s : stages) {
    costs.times.push_back({s.scheduleForward, s.scheduleBackwardInput + s.scheduleBackwardWeight,
                           s.scheduleBackwardInput, s.scheduleBackwardWeight});
    any = any || s.scheduleForward > 0;
  }
  if (!any) return std::nullopt;
  return costs;
}

pipeline::Schedule Plan::runSchedule(bool fit) const {
  const auto costs = fit ? scheduleCosts() : std::nullopt;
  return pipeline::makeSchedule(*schedule, static_cast<int>(stages.size()) / chunks, microBatches, chunks,
                                costs ? &*costs : nullptr);
}

pipeline::RefillCosts Plan::refillCosts() const {
  pipeline::RefillCosts refill;
  if (refillWaitSeconds <= 0) return refill;
  refill.waitSeconds = refillWaitSeconds;
  for (auto& s : stages) refill.share.push_back(s.refillShare);
  return refill;
}

std::vector<TensorDecision> Plan::stageDecisions(int stage) const {
  std::vector<TensorDecision> out;
  for (auto& d : decisions) {
    if (d.stage == stage) out.push_back(d);
  }
  return out;
}

namespace {

// A baseline policy on given cuts: its fixed choices (everything kept, or
// full_recompute's), checked against the budget. With the choices fixed there
// is no knapsack to keep exact, so the check uses the predicted peak itself
// (CostModel.h), not the bound the partitioner's choices must fit; one that
// does not fit names the smallest budget every stage fits, in the words the
// partitioner uses (budgetAdvice).
Partition fixedPartition(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& p,
                         const std::vector<int>& cuts) {
  Partition out;
  out.cuts = cuts;
  int worst = -1;
  for (int k = 0; k < p.stages; ++k) {
    const int first = k == 0 ? 0 : cuts[k - 1], end = k + 1 == p.stages ? p.numNodes() : cuts[k];
    const auto freed = st.policy == memory::MemoryPolicy::FullRecompute ? fullRecomputeChoices(graph, profile, p, first, end)
                                                     : std::vector<std::pair<int, Action>>{};
    auto s = evaluateStage(p, k, first, end, freed);
    s.fits = p.budgetBytes <= 0 || s.peakBytes <= p.budgetBytes;
    if (worst < 0 || s.peakBytes > out.stages[worst].peakBytes) worst = k;
    out.stages.push_back(std::move(s));
  }
  const auto& w = out.stages.at(worst);
  SLUICE_CHECK(w.fits, PlanError,
               "partition: with memory.policy " << choiceName(memory::memoryPolicies(), st.policy) << ", stage " << worst
                   << " (nodes [" << w.first << ", " << w.end << ")) needs " << formatBytesExact(w.peakBytes)
                   << "; the budget is " << formatBytesExact(p.budgetBytes)
                   << (p.budgetShares > 1 ? " (its share of the rank's)" : "") << "; the smallest budget that fits is "
                   << budgetAdvice(w.peakBytes, std::max(1, p.budgetShares))
                   << ", or use more stages, or let the partitioner free memory (memory.policy plan)");
  out.stepTime = stepTime(out.stages, p.microBatches);
  return out;
}

Partition partitionBeforeRankCheck(const OpGraph& graph, const Profile& profile, const PlanSettings& st,
                                   const Problem& p, const std::vector<int>* cuts, StageMemo* memo) {
  if (st.policy != memory::MemoryPolicy::Plan) {
    // The split that is fastest without a budget; the fixed choices must then fit.
    std::vector<int> chosen;
    if (cuts) {
      chosen = *cuts;
    } else {
      Problem unlimited = p;
      unlimited.budgetBytes = 0;
      chosen = partitionOptimal(unlimited).cuts;
    }
    return fixedPartition(graph, profile, st, p, chosen);
  }
  return cuts ? partitionWithCuts(p, *cuts, memo) : partitionOptimal(p);
}

// The partition of `cuts` (or the best), which under a relaxed share (Note
// [rank budget]) must also fit each rank's budget, its stages together.
Partition partitionFor(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& p,
                       const std::vector<int>* cuts, StageMemo* memo = nullptr) {
  auto part = partitionBeforeRankCheck(graph, profile, st, p, cuts, memo);
  if (p.rankBudgetBytes > 0) {
    const auto bounds = rankBounds(st, profile, part, p);
    for (size_t r = 0; r < bounds.size(); ++r) {
      SLUICE_CHECK(bounds[r] <= p.rankBudgetBytes, PlanError,
                   "partition: rank " << r << " needs " << formatBytesExact(bounds[r]) << ", over its budget of "
                                      << formatBytesExact(p.rankBudgetBytes));
    }
  }
  return part;
}

// Schedules other than GPipe and 1F1B (zb-h1, interleaved, interleaved-zb):
// the DP's cuts minimise the 1F1B objective (sum t + (m - 1) max t), which
// balances stages one by one; these schedules' step also depends on how the
// stages' times add up per rank and on which stage starts and ends the
// pipeline. So move one cut at a time by up to kRefineReach nodes (coordinate descent)
// while the simulated step (simulatedStepTime) improves. Every candidate is
// evaluated exactly as the final plan is (its stages' best actions within the
// budget; cuts that are invalid or do not fit are skipped).
Partition refineForSchedule(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const Problem& p,
                            Partition part) {
  if (p.inFlightPerStage.empty() || part.cuts.empty()) return part;
  double best = simulatedStepTime(st, profile, part, p);
  StageMemo memo;  // a candidate moves one cut: the other stages are as before
  for (int round = 0; round < 256; ++round) {  // each round but the last improves the step
    if (st.progress) st.progress("refining cuts for " + st.schedule.name() + ", round " + std::to_string(round + 1));
    bool improved = false;
    for (size_t k = 0; k < part.cuts.size(); ++k) {
      for (int step = 1; step <= 2 * kRefineReach; ++step) {
        const int delta = step % 2 ? (step + 1) / 2 : -step / 2;  // 1, -1, 2, -2, ...
        auto cuts = part.cuts;
        cuts[k] += delta;
        const int lo = k == 0 ? 1 : cuts[k - 1] + 1, hi = k + 1 < cuts.size() ? cuts[k + 1] - 1 : p.numNodes() - 1;
        // Fixed policies (none, full_recompute) do not check cuts themselves: skip invalid ones here.
        if (cuts[k] < lo || cuts[k] > hi || !p.validCut[cuts[k]]) continue;
        try {
          auto candidate = partitionFor(graph, profile, st, p, &cuts, &memo);
          const double t = simulatedStepTime(st, profile, candidate, p);
          if (t < best * (1 - 1e-9)) {
            best = t;
            part = std::move(candidate);
            improved = true;
          }
        } catch (const PlanError&) {
        } catch (const GraphError&) {
        }
      }
    }
    if (!improved) break;
  }
  return part;
}

// The step time a plan of `part` predicts (toPlan's stepTime).
double predictedStep(const PlanSettings& st, const Profile& profile, const Partition& part, const Problem& p) {
  return predict(st, profile, part, p).stepTime;
}

// Note [layer boundaries first]: the profile method's best cuts between
// layers (the cost model's optimum with cuts only on layerBoundaries()), when
// the op-level optimum `opLevel` is not predicted at least
// st.minOpLevelGain of the step faster; else nothing. Why: two splits a few
// ops apart are predicted within a percent or two of each other, well inside
// the cost model's step-time error (bench/partition: measured/predicted 0.97
// to 1.04), so such a "gain" is noise; a cut between layers hands the next
// stage only the residual stream, never a parameter view or a half-finished
// block, and is the split users and the `layers` peer expect. Where op-level
// cuts pay (a model with fewer heavy layers than stages can share evenly,
// bench/partition's one_block: 1.29x) the gain is far above the threshold.
struct LayerAligned {
  Partition partition;
  double opLevelStep = 0;  // the passed-over op-level optimum's predicted step
};

std::optional<LayerAligned> layerAligned(const OpGraph& graph, const Profile& profile, const PlanSettings& st,
                                         const Problem& p, const Partition& opLevel) {
  if (st.minOpLevelGain <= 0 || opLevel.cuts.empty()) return std::nullopt;
  const auto bounds = layerBoundaries(graph);
  std::vector<char> onBoundary(p.numNodes() + 1, 0);
  for (int b : bounds) onBoundary[b] = 1;
  if (std::all_of(opLevel.cuts.begin(), opLevel.cuts.end(), [&](int c) { return onBoundary[c] != 0; })) {
    return std::nullopt;  // already there
  }
  Problem layered = p;
  for (int c = 1; c < p.numNodes(); ++c) layered.validCut[c] = p.validCut[c] && onBoundary[c];
  if (st.progress) st.progress("cuts between layers for " + st.schedule.name());
  try {
    auto aligned = refineForSchedule(graph, profile, st, layered, partitionFor(graph, profile, st, layered, nullptr));
    const double op = predictedStep(st, profile, opLevel, p), layer = predictedStep(st, profile, aligned, p);
    if (op >= layer * (1 - st.minOpLevelGain)) return LayerAligned{std::move(aligned), op};
  } catch (const PlanError&) {  // too few layers, or no split on them fits the budget
  } catch (const GraphError&) {
  }
  return std::nullopt;
}

}  // namespace

// Note [rank window]: a rank's stages share one swap engine, whose window
// (memory.swap_window_mb 0: an eighth of the budget) the DP sizes from a
// stage's share of the budget, a half or less of what a rank with one stage
// gets. A window that small holds one storage read ahead, and the writes
// of a forward then wait for the reads of the next backward (bench/memory,
// docs/benchmarks.md). Once the plan is chosen, its window grows toward an
// eighth of the rank's budget by what every rank leaves of its budget at its
// predicted peak; the peaks grow with it, so every rank still fits.
void widenRankWindow(Plan& plan, const PlanSettings& st) {
  if (plan.swapWindowBytes <= 0 || st.budgetBytes <= 0 || plan.stages.front().rankPeakBytes <= 0) return;
  int64_t extra = st.budgetBytes / 8 - plan.swapWindowBytes;
  for (const auto& s : plan.stages) extra = std::min(extra, st.budgetBytes - s.rankPeakBytes);
  if (extra <= 0) return;
  plan.swapWindowBytes += extra;
  const auto placement = pipeline::placementOf(st.schedule.kind(), st.stages, st.chunks);
  for (int rank = 0; rank < st.stages; ++rank) {
    bool swaps = false;
    for (int k : placement.stagesOf(rank)) swaps = swaps || plan.stages.at(k).windowBytes > 0;
    if (!swaps) continue;
    for (int k : placement.stagesOf(rank)) {
      auto& s = plan.stages.at(k);
      s.rankPeakBytes += extra;
      if (s.windowBytes > 0) s.windowBytes += extra, s.peakBytes += extra;
    }
  }
}

// The relaxed shares of a rank budget, from the most generous down.
constexpr double kRelaxedShares[] = {2.0, 1.6, 1.35, 1.15};

// The plan of the first relaxed share (within chunks) under which every rank
// fits `rankBudget` with its stages together; none when no share does.
template <typename PlanOf>
std::optional<Plan> relaxedPlan(const PlanSettings& st, const Problem& problem, int64_t rankBudget, PlanOf& planOf) {
  for (double relax : kRelaxedShares) {
    if (relax > st.chunks) continue;
    if (st.progress) st.progress(st.schedule.name() + " with relaxed shares, " + std::to_string(relax).substr(0, 4) + "x");
    Problem q = problem;
    q.budgetBytes = static_cast<int64_t>(relax * static_cast<double>(rankBudget) / st.chunks);
    q.rankBudgetBytes = rankBudget;
    q.nameSmallestBudget = false;
    try {
      return planOf(q);
    } catch (const PlanError&) {
    } catch (const GraphError&) {
    }
  }
  return std::nullopt;
}

// Nothing fits `problem` even with each rank's stages together: the error
// naming a budget that does. The equal shares' smallest E always fits; with
// the stages together less may, so the smallest budget some relaxed share
// meets is bisected between E / chunks and E, to 1% of E. Feasibility is
// not monotone here (the relaxed shares move the cuts), so the budget named
// is one that planned (also rounded up as named), not necessarily the least.
// Only without a swap tier:
// with one, every probe runs the swap knapsacks' whole DP (seconds each on
// the quickstart), so the error names E and says that less may fit.
template <typename PlanOf>
PlanError rankBudgetError(const PlanSettings& st, const Problem& problem, const PlanError& equalError, PlanOf& planOf) {
  const int64_t share = minimalBudget(problem);
  if (share <= 0) return equalError;
  const int64_t equalBudget = share * st.chunks;
  if (st.progress) st.progress(st.schedule.name() + ": the smallest budget each rank's stages meet together");
  int64_t lo = share, hi = equalBudget;
  const int64_t step = std::max<int64_t>(equalBudget / 100, 1 << 10);
  while (hi - lo > step) {
    const int64_t mid = lo + (hi - lo) / 2;
    (relaxedPlan(st, problem, mid, planOf) ? hi : lo) = mid;
  }
  // The budget as a user gives it (MiB to 1/100, rounded up, as named) must plan too.
  const double mib = std::ceil(static_cast<double>(hi) * 100.0 / (1 << 20)) / 100.0;
  if (hi >= equalBudget || !relaxedPlan(st, problem, static_cast<int64_t>(mib * 1024.0 * 1024.0), planOf)) {
    return equalError;
  }
  std::ostringstream os;
  os << "partition: no split into " << st.stages * st.chunks << " stages fits the budget of "
     << formatBytesExact(st.budgetBytes) << " per rank, with an equal share per stage or each rank's "
     << "stages together; a budget that fits is " << budgetAdvice(hi, 1) << " (with each rank's stages together; an "
     << "equal share per stage needs " << formatBytesExact(equalBudget) << ")";
  return PlanError(os.str());
}

// Note [rank budget]: a rank that hosts several stages (interleaved, zbv)
// holds them at once, and the DP checks stages one at a time: each gets an
// equal share of the rank's budget, which always fits (the shares' bounds
// add up to at most the budget) but counts every stage's transient memory
// and swap window once per stage, and its peak as if the stages' peaks
// coincided. So the planner also tries relaxed shares (up to the whole
// budget per stage), from the most generous down, and keeps the first plan
// whose every rank fits the budget with its stages together: the rank's
// predicted peak (at each moment of its action order, what its stages hold
// then, the acting stage's transient and the communication buffers, plus
// one swap window; PlanStage::rankPeakBytes) with each transient as the
// budget bound counts it (every freeable storage's span). It keeps that plan
// when it is predicted faster than the equal shares' (or they do not fit).
// When nothing fits, the error names a budget that does with the stages
// together (rankBudgetError; with the planner's own cuts and choices). Not
// with DistAdam over several ranks, whose step buffers the rank bound leaves
// out.
// givenCuts: the cuts are the user's (the error names the equal shares' budget then).
template <typename PlanOf>
Plan withRankBudget(const PlanSettings& st, const Problem& problem, bool givenCuts, PlanOf planOf) {
  const bool relaxable = st.chunks > 1 && problem.budgetBytes > 0 && problem.stepRanks <= 1;
  if (!relaxable) return planOf(problem);
  std::optional<Plan> best;
  std::optional<PlanError> equalError;  // naming the smallest budget equal shares fit, thrown if nothing fits
  if (st.progress) st.progress(st.schedule.name() + " with an equal share of the budget per stage");
  try {
    best = planOf(problem);
  } catch (const PlanError& e) {
    equalError = e;
  }
  if (auto relaxed = relaxedPlan(st, problem, st.budgetBytes, planOf)) {
    if (!best || relaxed->stepTime < best->stepTime) best = std::move(relaxed);
  }
  const bool search = !givenCuts && st.policy == memory::MemoryPolicy::Plan && problem.swapSecondsPerByte == 0;
  if (!best) throw search ? rankBudgetError(st, problem, *equalError, planOf) : *equalError;
  if (st.swapWindowShare > 0) widenRankWindow(*best, st);
  return std::move(*best);
}

Plan makePlan(const OpGraph& graph, const Profile& profile, const PlanSettings& st) {
  const int pieces = st.stages * st.chunks;
  switch (st.method) {
    case PartitionMethod::Uniform: return planForCuts(graph, profile, st, uniformCuts(graph, pieces));
    case PartitionMethod::Parameters: return planForCuts(graph, profile, st, parameterCuts(graph, pieces));
    case PartitionMethod::Layers: return planForCuts(graph, profile, st, layerCuts(graph, profile, pieces));
    case PartitionMethod::Profile: break;
    case PartitionMethod::Cuts:
      throw PlanError("partition: method cuts plans the user's own cuts: call planForCuts with them");
  }
  SLUICE_CHECK(st.minOpLevelGain >= 0 && st.minOpLevelGain < 1, PlanError,
               "partition: the minimum op-level gain must be in [0, 1), got " << st.minOpLevelGain);
  return withRankBudget(st, makeProblem(graph, profile, st), false, [&](const Problem& problem) {
    auto opLevel = refineForSchedule(graph, profile, st, problem, partitionFor(graph, profile, st, problem, nullptr));
    auto aligned = layerAligned(graph, profile, st, problem, opLevel);
    if (!aligned) return toPlan(graph, profile, st, problem, opLevel);
    auto plan = toPlan(graph, profile, st, problem, aligned->partition);
    plan.opLevelCuts = opLevel.cuts;
    plan.opLevelStepTime = aligned->opLevelStep;
    plan.minOpLevelGain = st.minOpLevelGain;
    return plan;
  });
}

Plan planForCuts(const OpGraph& graph, const Profile& profile, const PlanSettings& st, const std::vector<int>& cuts) {
  splitGraph(graph, cuts);  // GraphError naming nearby valid cuts when one is invalid
  return withRankBudget(st, makeProblem(graph, profile, st), true, [&](const Problem& problem) {
    return toPlan(graph, profile, st, problem, partitionFor(graph, profile, st, problem, &cuts));
  });
}

}  // namespace sluice::partition
