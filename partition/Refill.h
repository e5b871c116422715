// partition::measureRefill: how much slower a stage's work runs right after
// its rank waited.
//
// Note [refill after a wait]
// A pipeline rank whose stage is lighter than its neighbour's waits for most
// of each step (in 1F1B, before every backward: the gradient comes from the
// slower stage). While it waits, other work on the machine (the other ranks,
// other tenants of a shared host) evicts its data from the caches it shares
// with them, and its first forward or backward after the wait runs slower
// while it fetches them again. The profile's passes run back to back and
// never see it. On this 2-core VM it cost the large-vocabulary GPT's light
// first stage a median 7% (measured: docs/benchmarks.md, "Refill after a
// wait").
//
// measureRefill() times it: the graph is cut into up to `pieces` pieces of
// similar profiled time (at valid cuts, like stages). In each of `rounds`
// rounds one rank (round r: rank r % ranks) takes every piece in turn: an
// untimed forward + backward, `passes` timed ones back to back (warm), then
// `passes` timed ones each right after a wait of `waitSeconds` (cold); the
// other ranks run the other pieces back to back beside it, as a busy
// neighbour stage runs while a light one waits, unless the host runs more
// ranks than it has cores (they would take the measuring rank's core; they
// wait instead). A piece's share is the median over rounds of (median cold -
// median warm), over the median warm. Negative shares (noise) are 0. A
// single pass varies by +-20% on this machine, so a share is good to a few
// percent, and a piece's share is an average over it (what the shares came
// to: docs/benchmarks.md). The wait polls and yields as training's waits do
// (Communicator::Work::wait).
//
// The cost model charges it per action (pipeline::RefillCosts, Schedule.h):
// an action of a stage that starts after its rank idled for w runs longer by
// the stage's share x its time x min(1, w / waitSeconds), the stage's share
// being its nodes' pieces' shares weighted by the nodes' profiled times
// (refillShare()).
//
// Collective over comm; every rank gets the same shares. The pieces come from
// the profile's node times, which must be the same on every rank
// (averageOverRanks first). Parameters are copied into fresh leaves, so the
// model's .grad is untouched. Takes rounds x (1 + 2 passes) forwards and
// backwards of the model plus rounds x pieces x passes waits: with rounds 0
// (the default) as many rounds, from 3 to 8, as fit in about 4 s by the
// profile's times (8 on the GPTs of bench/partition: about 4 s).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/Communicator.h"
#include "core/OpGraph.h"
#include "partition/Profile.h"
#include "partition/Profiler.h"

namespace sluice::partition {

struct RefillOptions {
  int pieces = 4;
  int rounds = 0;  // 0: as many (3 to 8) as fit in budgetSeconds by the profile's times
  int passes = 3;  // per piece and round: back to back, then each after a wait
  double waitSeconds = 0.02;
  double budgetSeconds = 4;
};

// inputs: one tensor per graph input, in graph input order (as profileGraph).
RefillProfile measureRefill(const OpGraph& graph, const std::vector<at::Tensor>& inputs, const Profile& profile,
                            const Communicator& comm, const RefillOptions& options = {});

// The cuts measureRefill uses: up to `pieces` - 1 valid cuts splitting the
// nodes' profiled forward + backward time into near-equal pieces (each cut
// is the valid cut nearest the next equal share, increasing).
std::vector<int> refillCuts(const OpGraph& graph, const Profile& profile, int pieces);

// The refill share of nodes [first, end): each node's piece's share weighted
// by the node's profiled forward + backward time; 0 when the profile has no
// refill pieces.
double refillShare(const Profile& profile, int first, int end);

}  // namespace sluice::partition
