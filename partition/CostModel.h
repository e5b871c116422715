// partition::CostModel: predicts a pipeline stage's time and memory.
//
// Inputs (all per micro-batch): every node j has forward time f_j, backward
// time b_j, parameter bytes w_j and workspace bytes k_j (the most it
// allocates beyond what stays, in forward or backward). Every storage s that
// autograd saves (Note [storage keys], memory/MemoryPlan.h) has bytes B_s, a
// producer p_s, its first saver q_s (>= p_s) and a recompute segment G_s: the
// nodes re-run to rebuild it (p_s, the in-place writers of s, and the
// producers of any input nothing saved); a stage may recompute s only if no
// node of G_s inside it writes a parameter or buffer in place (BatchNorm's
// running statistics would be updated twice).
//
// Stage k of p runs nodes [first, end). Its freeable storages are those with
// first <= p_s and q_s < end; each gets one action:
//   Keep       held from forward until backward;
//   Swap       written to the swap tier at its first save and read back before
//              its backward, on the I/O thread; costs bytes x (1/write_bw +
//              1/read_bw) of I/O time, and bytes x the compute time swapping
//              takes from the cores (measured: the kernel's share of I/O);
//   Recompute  dropped and rebuilt in backward by re-running G_s from `first`
//              on: costs sum of f_n over n in G_s, n >= first. (Storages
//              whose segments overlap are rebuilt together, shared nodes run
//              once: the charge per storage is an upper bound, which keeps
//              the choice a knapsack.)
// Time t_k = sum f + sum b + comm + loss + recompute + swapCpu
//            + max(0, swapIO - (sum f + sum b)):
//   the I/O thread works while the stage computes; only I/O beyond the
//   stage's compute stalls it. comm = 2 (latency + X_c / bw) at each cut
//   the stage touches (X_c: bytes live across cut c); the loss's forward and
//   backward on the last stage.
// Memory (predicted peak) M_k = static + inFlight_k * held + transient + (swap used ? W : 0):
//   static  = paramBytes * staticPerParamByte (weights, gradients, Adam state:
//             4 for AdamW, 2 + 2/dp for DistAdam over dp);
//   and never below static + stepBytes (DistAdam's step buffers, Problem);
//   held    = boundary inputs (X_first; the data input on stage 0) + kept
//             freeable storages + the loss's saved tensors on the last stage;
//   inFlight_k = m for GPipe, min(p - k, m) for 1F1B, the schedule's own
//             count for interleaved 1F1B (per stage; a rank's stages share
//             its budget equally, Plan.h) and, up to BackwardInput, for the
//             schedules that split backward; these also hold, from
//             BackwardInput to BackwardWeight, what W reads (Note [split
//             backward holding], Problem): the predicted peak takes the
//             largest a x held + b x heldWeight over the (a, b) counts the
//             stage reaches at once, the bound max a x held + max b x the
//             weight share's bound;
//   transient = max over the stage's nodes j of (k_j - the kept bytes of
//             storages first saved after j + the freed storages in use at j)
//             (and the loss's workspace on the last stage): node j runs, in
//             forward or in backward, while its micro-batch holds only what is
//             saved up to j, plus any freed storage whose span covers j: from
//             its first saver to its last reader (forward still reads it) or,
//             when a recomputed storage's segment needs it or shares a node
//             with its segment, to that storage's span end (backward rebuilds
//             them together, or reads it back, that early and holds it until
//             its own first saver's backward), with the replay's own peak
//             where a recompute group is rebuilt (Note [replay peak],
//             CostModel.cpp: forward order, each node's forward workspace
//             over the storages rebuilt before it); + the
//             communication buffers (the step's data, X_first, 2 X_end:
//             Note [stage buffers], CostModel.cpp);
//   W = the swap window (bytes in flight to or from the tier).
// Step time T = sum_k t_k + (m - 1) max_k t_k.
// Budget: a stage fits when a bound of its memory fits: M_k with transient
// taken as max over j of (k_j + every freeable storage whose span covers j),
// which holds whatever is freed, so the choice of freed storages stays a
// knapsack. Spans are computed as if every recomputable storage were
// recomputed when the stage recomputes anything (and every node then counts
// the largest workspace a recompute may re-run); from first saver to last
// reader when it only swaps (nothing is read back early then). Freed bytes
// count in whole units u (memoryUnit, Note [memory unit]), each storage's
// rounded down; a stage fits when the units it frees cover
// ceil(ceil(E / inFlight) / u), E = the bound with everything kept - budget.
// Both are conservative (what fits in units fits in bytes).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/MemoryPlan.h"
#include "pipeline/Schedule.h"

namespace sluice::partition {

// One action enum for the planner and the runtime (memory/MemoryPlan.h; actionName there).
using Action = memory::TensorAction;

struct NodeCost {
  double forward = 0, backward = 0;  // seconds
  int64_t params = 0;                // bytes of parameters first read here
  int64_t workspace = 0;             // bytes
  // Bytes its forward allocates beyond what was allocated when it started
  // (outputs and temporaries; the replay holds the rebuilt storages apart):
  // what a recompute's re-run of it costs. -1: not known, workspace counts.
  int64_t forwardWorkspace = -1;
};

struct SavedStorage {
  int producer = 0, slot = 0;
  int firstSaver = 0;
  int lastReader = 0;  // the last node reading a value on it (numNodes(): a graph output)
  std::vector<int> savers;  // the nodes that save it, ascending
  // Under a split backward: some saver's backward computes a weight
  // gradient, so the storage is read again by BackwardWeight (Note [split
  // backward memory], memory/StageMemory.h).
  bool weightReads = false;
  // Saved storages (indices into Problem::storages, made earlier) that the
  // segment reads from outside itself: recomputing this one rebuilds or reads
  // them back first.
  std::vector<int> inputs;
  int64_t bytes = 0;
  std::vector<int> segment;  // ascending; contains producer
  int lastParamWriter = -1;  // the last node of segment that writes a parameter or buffer; -1: none
};

// A parameter read by several nodes (a tied weight: the embedding and the
// output head). NodeCost::params counts it at its first reader; every other
// stage that reads it holds a copy too (Note [tied parameters],
// train/RankTopology.h), so those stages count its bytes as well.
// A stage with several of a parameter's readers also holds one gradient more
// per extra reader during backward (Note [reader gradients],
// pipeline/RankWorker.h): counted with its static bytes.
struct SharedParam {
  int64_t bytes = 0;
  std::vector<int> readers;  // node indices, ascending
  bool parameter = true;     // false: a buffer (no gradient)
};
// The extra reader gradients of stage [first, end) (above).
int64_t readerGradBytes(const std::vector<SharedParam>& shared, int first, int end);

struct Problem {
  std::vector<NodeCost> nodes;
  std::vector<SharedParam> sharedParams;
  std::vector<SavedStorage> storages;
  std::vector<int64_t> cutBytes;  // size n + 1: bytes live across cut c; cutBytes[0] = data input bytes, [n] = 0
  std::vector<char> validCut;     // size n + 1: may a stage start at c? (0 and n always)
  double lossSeconds = 0;         // forward + backward of the loss, last stage only
  int64_t lossSavedBytes = 0, lossWorkspace = 0;
  int64_t dataBytes = 0;          // one micro-batch's input + target, held by every stage (0: cutBytes[0], stage 0)
  double p2pBandwidth = 0;        // bytes/s; 0: communication is free
  double p2pLatency = 0;          // seconds
  double swapSecondsPerByte = 0;  // 1/write_bw + 1/read_bw; 0: no swap tier (Swap not allowed)
  double swapCpuSecondsPerByte = 0;  // compute time lost per byte swapped
  int64_t swapWindowBytes = 0;    // the swap window W: this many bytes ...
  double swapWindowShare = 0;     // ... + this share of the budget
  int64_t window() const { return swapWindowBytes + static_cast<int64_t>(swapWindowShare * budgetBytes); }
  int stages = 1;
  int microBatches = 1;
  bool gpipe = false;              // else 1F1B
  // When set (zb-h1, interleaved: schedules other than GPipe and 1F1B; there
  // `stages` counts every stage of every rank): each stage's peak micro-batches
  // between their forward and their backward (B), or under a split backward
  // their BackwardInput (pipeline::peakAwaitingBackward).
  std::vector<int> inFlightPerStage;
  // Under a split backward (zb-h1, interleaved-zb), Note [split backward
  // holding]: each stage's peak micro-batches between BackwardInput and
  // BackwardWeight (pipeline::peakWeightPending), the (between F and Bi,
  // between Bi and W, a Bi finishing) counts a stage reaches at once
  // (pipeline::holdingMixes), and prefix sums (size n + 1) over nodes of the
  // output-gradient bytes a deferred weight gradient re-enters a node with
  // (nodes whose backward feeds both activations and weights). A micro-batch
  // between Bi and W holds its boundary input, its kept and recomputed
  // storages that W reads (SavedStorage::weightReads; a swapped one is back
  // on the tier) and those gradients; on the first stage (whose
  // BackwardInput computes nothing: its W runs the whole backward) all it
  // held before Bi, and its output gradients (cutBytes at its end). A Bi
  // finishing holds its micro-batch's saved tensors, the gradients it
  // captured and the freed storages W reads (its nodes read them back).
  std::vector<int> weightPendingPerStage;
  std::vector<std::vector<pipeline::HoldingMix>> holdingMixes;
  std::vector<int64_t> weightGradPrefix;
  int64_t weightGradPerMicroBatch(int first, int end) const;
  int64_t weightGradBytes(int stage, int first, int end) const;  // weightPending x weightGradPerMicroBatch
  // The budget bound's share of the micro-batches between Bi and W (beyond
  // holdingFactor's): every storage W may read counted whatever its action
  // (so that freeing a storage lowers the bound by holdingFactor x its
  // bytes: a knapsack still), their captured gradients, and a finishing
  // Bi's gradients and storages W reads once. weightSaved: the stage's saved
  // bytes with weightReads.
  int64_t weightHeldBound(int stage, int first, int end, int64_t weightSaved) const;
  int64_t budgetBytes = 0;         // per stage; 0: no limit
  // The unit the memory knapsacks count in (memoryUnit); 0: derived from the
  // storages. It must not depend on the budget: Note [memory unit].
  int64_t unitBytes = 0;
  int budgetShares = 1;            // stages per rank sharing the rank's budget equally (messages name the rank's)
  // Note [rank budget] (partition/Plan.cpp): when set, budgetBytes is a
  // relaxed share of a rank's budget and a plan must also fit this, each
  // rank's stages together (checked by the planner, not by the DP).
  int64_t rankBudgetBytes = 0;
  double staticPerParamByte = 4;   // see above
  // The optimizer step's own buffers: DistAdam over stepRanks > 1 ranks
  // (Note [step buffers], optim/DistAdamBuckets.h) holds, after backward, the
  // gradient shards (paramBytes / ranks) and, for up to two buckets (of at
  // most stepBucketBytes, or one parameter over it: largestParamBytes), a
  // parameter shard and a gather buffer. Activations are gone by then: a
  // stage's peak is the larger of its training peak and static + stepBytes.
  // 0 ranks: none (AdamW, DistAdam's allreduce, one rank). Padding (under
  // `ranks` elements per bucket) is left out.
  int stepRanks = 0;
  int64_t stepBucketBytes = 0;
  int64_t stepBytes(int64_t paramBytes, int64_t largestParamBytes) const;
  bool prune = true;               // partitioner search pruning (large graphs); the result is the same without
  bool nameSmallestBudget = true;  // a PlanError for a budget nothing fits names the smallest that would (minimalBudget: slow)

  int numNodes() const { return static_cast<int>(nodes.size()); }
  // Throws PlanError when sizes disagree, a value is negative or a storage is malformed.
  void validate() const;
};

int inFlight(const Problem& problem, int stage);
// How many micro-batches' held bytes (boundary + kept + loss) a stage's
// budget bound counts: inFlight, and under a split backward on the first
// stage (whose W runs its whole backward, so a micro-batch between Bi and W
// holds all it held before) its weight-pending ones too. Freeing a byte
// lowers the bound by this many bytes.
int holdingFactor(const Problem& problem, int stage, int first);
// Note [memory unit]: the knapsacks count freed memory in whole units, each
// storage rounded down and each need rounded up, so a plan that fits in units
// fits in bytes. The unit is a fixed fraction of the problem's saved bytes
// (unitBytes, or all storages' bytes / 2048, finer than the budget / 1024 it
// once was on the quickstart and still fast on 5,000 nodes: the knapsacks'
// size grows with the units a stage's reach holds), never of the budget:
// with a unit that grew with the budget, a larger budget could round away
// more than it added, so feasibility was not monotone in the budget and the
// smallest budget that fits (minimalBudget) could fail one MiB higher.
constexpr int64_t kMemoryUnits = 2048;
int64_t memoryUnit(const Problem& problem);
// Note [swapped weight reads]: under a split backward a stage after the
// first holds, between Bi and W, the storages W reads that it kept or
// recomputed, but not the swapped ones (they are back on the tier: Note
// [split backward holding]). So swapping such a storage lowers the budget
// bound by (holdingFactor + weightPending) x its bytes, recomputing it by
// holdingFactor x its bytes only. The knapsacks count the swap in units of
// the holding factor's bytes, scaled by the least (f + P) / f over the
// stages that may start after node 0 (f = holdingFactor, P = weightPending):
// one ratio per problem, so that every stage index shares the knapsacks and
// evaluateStage counts the same units as the partitioner; conservative for
// stages with a larger ratio. {1, 1} without a split backward.
struct Ratio {
  int64_t num = 1, den = 1;
};
Ratio swapHoldingRatio(const Problem& problem);
// The units freeing `storage` with `action` counts in a stage starting at
// `first` (bytes / unit, rounded down; a swapped storage W reads, Note
// [swapped weight reads], scaled by `ratio`).
int64_t freedUnits(const Problem& problem, int storage, int first, Action action, int64_t unit, Ratio ratio);
double commSeconds(const Problem& problem, int cut);  // both directions at one cut; 0 at 0 and n
bool storageInStage(const Problem& problem, int storage, int first, int end);
// Seconds to recompute storage s in a stage starting at `first`; +inf when not recomputable.
double recomputeSeconds(const Problem& problem, int storage, int first);
// The stage's transient bytes (see above) with these storages freed; and the
// bound the budget check uses. freeable(x): x may be freed in this stage
// (at least one memory unit, and swap or recompute allowed).
int64_t transientBytes(const Problem& problem, int first, int end, const std::vector<char>& freed);
int64_t transientBound(const Problem& problem, int first, int end, bool recomputes);
// Span ends (see above) with these storages recomputed (recomputed[x] != 0)
// in a stage starting at `first`; spanEndsBound(): with every storage
// recomputed, for any stage.
std::vector<int> spanEnds(const Problem& problem, const std::vector<char>& recomputed, int first);
std::vector<int> spanEndsBound(const Problem& problem);
bool freeable(const Problem& problem, int storage, int first, int64_t unit);  // unit: memoryUnit(problem)
// The communication buffers a stage [first, end) holds besides its
// micro-batches (Note [stage buffers], CostModel.cpp): all of them, and those
// that do not depend on `end` (the step's data and the next input's).
int64_t stageBuffers(const Problem& problem, int first, int end);
int64_t inputBuffers(const Problem& problem, int first);
// The largest forward workspace (NodeCost::forwardWorkspace) of the nodes
// recomputing `storage` re-runs in [first, end): a re-run is forward only.
int64_t segmentWorkspace(const Problem& problem, int storage, int first, int end);

struct StageCost {
  bool fits = false;
  int stage = 0, first = 0, end = 0, inFlight = 0;
  double forward = 0, backward = 0, comm = 0, swapIO = 0, swapStall = 0, swapCpu = 0, recompute = 0, loss = 0;
  double time = 0;  // forward + backward + comm + swapCpu + swapStall + recompute + loss
  int64_t paramBytes = 0, staticBytes = 0, boundaryBytes = 0, savedBytes = 0, keptBytes = 0, swappedBytes = 0,
          recomputedBytes = 0, transientBytes = 0, windowBytes = 0;
  int64_t heldBytes = 0;  // per micro-batch in flight: boundary + kept + loss saved
  int64_t heldWeightBytes = 0;  // per micro-batch between Bi and W (split backward): what W reads + gradients
  int64_t holdingBytes = 0;     // the micro-batches' share of the peak (inFlight x held, or the mixes')
  int64_t capturedBytes = 0;    // at a Bi's end (split backward): its captured gradients and the freed storages W reads
  int64_t peakBytes = 0;  // static + inFlight * held + transient + window: the predicted peak
  int64_t boundBytes = 0; // the same with transientBound: what must fit the budget
  std::vector<std::pair<int, Action>> freed;  // storage indices not kept
};

// The cost of stage `stage` over [first, end) with the given actions (storage
// index, action; Keep for storages absent). Throws PlanError on a storage not
// in the stage or an action it does not allow. fits = false when over budget.
StageCost evaluateStage(const Problem& problem, int stage, int first, int end,
                        const std::vector<std::pair<int, Action>>& freed);

double stepTime(const std::vector<StageCost>& stages, int microBatches);

}  // namespace sluice::partition
